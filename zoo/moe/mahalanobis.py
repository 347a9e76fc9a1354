"""MP-MoE's router (ICML 2026, "Mahalanobis-Pruned Mixture-of-Experts"): a diversity-aware greedy choice
of k experts per token under a Mahalanobis objective whose covariance comes from expert co-occurrence.

RECONSTRUCTION: no code was published. From the paper's abstract and public summaries we know the
objective is Mahalanobis-distance based, the covariance is the expert co-occurrence matrix, and the greedy
uses incremental Cholesky updates; the rest is ours and kept swappable:

  p = softmax(h W_r) [E];   value of a set S:  M(S) = p_Sᵀ Σ_SS⁻¹ p_S
  greedy: add j* = argmax_j Δ_j,  Δ_j = (p_j − Σ_jS Σ_SS⁻¹ p_S)² / (Σ_jj − Σ_jS Σ_SS⁻¹ Σ_Sj) = M(S∪j) − M(S)
  Σ from selection statistics f (usage, [E]) and C (co-occurrence, [E, E]): "phi" correlation
  (C − f fᵀ) / sqrt(f(1−f) f(1−f)ᵀ) or "normalized" D^-½ C D^-½, plus a ridge λ I.

With Σ ∝ I the greedy returns exactly top-k by p. Gates are the softmax of the chosen logits, so the
router is trained as a top-k router; the selection itself carries no gradient. Statistics are either
"running" (non-trainable `CoOccurrence` state, exponential moving averages of the router's own selections,
updated when `use_running_average` is False), or "batch" (estimated from the current batch's top-k picks,
no state: what a parameters-only trainer can carry). At inference (`use_running_average` True) plain top-k
is used unless `select_at_inference`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.moe.registry import register_router
from icml26zoo.moe.routers import Router, Routing, gated_routing, top_k_routing

STATISTICS = ("running", "batch")
COVARIANCES = ("phi", "normalized")
FREQUENCY_CLIP = 1e-4


class CoOccurrence(nnx.Variable):
    """Non-trainable routing statistics (never a Param: the optimizer never sees them)."""


@dataclasses.dataclass(frozen=True)
class MahalanobisOptions:
    """Options of the "mahalanobis" router."""

    # "running": EMA state updated in training mode; "batch": from the current batch's top-k picks, no state.
    statistics: str = "running"
    # Covariance proxy: "phi" (phi-correlation of selection indicators) or "normalized" co-occurrence.
    covariance: str = "phi"
    # EMA factor β of the running statistics.
    momentum: float = 0.99
    # Ridge λ added to the (unit-diagonal) covariance.
    ridge: float = 1e-3
    # Use the greedy selection also with use_running_average=True (inference); default plain top-k.
    select_at_inference: bool = False

    def __post_init__(self) -> None:
        if self.statistics not in STATISTICS:
            raise ValueError(f"mahalanobis router option 'statistics' must be one of {list(STATISTICS)}, "
                             f"got {self.statistics!r}")
        if self.covariance not in COVARIANCES:
            raise ValueError(f"mahalanobis router option 'covariance' must be one of {list(COVARIANCES)}, "
                             f"got {self.covariance!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"mahalanobis router option 'momentum' must lie in [0, 1), got {self.momentum!r}")
        if not self.ridge > 0:
            raise ValueError(f"mahalanobis router option 'ridge' must be > 0, got {self.ridge!r}")


def greedy_select(p: jax.Array, sigma: jax.Array, top_k: int) -> tuple[jax.Array, jax.Array]:
    """Greedy Mahalanobis selection for one token: p [E], sigma [E, E] SPD -> (indices [k] int32, gains [k]).

    Keeps V = L⁻¹ Σ_S,: ([k, E], rows filled one per step) and z = L⁻¹ p_S, where L is the Cholesky factor
    of Σ_SS; adding expert j appends the row [V_:,j, sqrt(Σ_jj − ‖V_:,j‖²)] to L, so each step costs
    O(k·E) (the incremental Cholesky update). Gains are M(S∪j) − M(S) ≥ 0 and M(S) = ‖z‖².
    """
    num_experts = p.shape[0]
    basis = jnp.zeros((top_k, num_experts), p.dtype)
    whitened = jnp.zeros((top_k,), p.dtype)
    chosen = jnp.zeros((num_experts,), jnp.bool_)
    diagonal = jnp.diagonal(sigma)
    indices, gains = [], []
    for step in range(top_k):
        # Elementwise sums rather than matmuls: exact float32 on every backend.
        residual = p - jnp.sum(basis * whitened[:, None], axis=0)
        schur = jnp.maximum(diagonal - jnp.sum(basis * basis, axis=0), 1e-12)
        gain = jnp.where(chosen, -jnp.inf, residual**2 / schur)
        j = jnp.argmax(gain)
        pivot = jnp.sqrt(schur[j])
        new_row = (sigma[j] - jnp.sum(basis[:, j][:, None] * basis, axis=0)) / pivot
        basis = basis.at[step].set(new_row)
        whitened = whitened.at[step].set(residual[j] / pivot)
        chosen = chosen.at[j].set(True)
        indices.append(j)
        gains.append(gain[j])
    return jnp.stack(indices).astype(jnp.int32), jnp.stack(gains)


def covariance(frequency: jax.Array, cooccurrence: jax.Array, kind: str, ridge: float) -> jax.Array:
    """Σ [E, E] from usage frequency [E] and co-occurrence [E, E]: unit diagonal (before the ridge) + λ I."""
    if kind == "phi":
        f = jnp.clip(frequency, FREQUENCY_CLIP, 1 - FREQUENCY_CLIP)
        spread = jnp.sqrt(f * (1 - f))
        sigma = (cooccurrence - f[:, None] * f[None, :]) / (spread[:, None] * spread[None, :])
    else:
        d = jnp.maximum(jnp.diagonal(cooccurrence), FREQUENCY_CLIP)
        sigma = cooccurrence / jnp.sqrt(d[:, None] * d[None, :])
    sigma = 0.5 * (sigma + sigma.T)
    return sigma + ridge * jnp.eye(frequency.shape[0], dtype=sigma.dtype)


def selection_statistics(indices: jax.Array, mask: jax.Array, num_experts: int) -> tuple[jax.Array, jax.Array]:
    """(mean indicator f [E], mean outer product C [E, E]) of the selections indices [N, k] over real tokens."""
    weight = mask.astype(jnp.float32)[:, None]
    m = jnp.sum(jax.nn.one_hot(indices, num_experts, dtype=jnp.float32), axis=1) * weight  # [N, E]
    count = jnp.maximum(jnp.sum(mask.astype(jnp.float32)), 1.0)
    return jnp.sum(m, axis=0) / count, jnp.einsum("ne,nf->ef", m, m, precision="highest") / count


def independent_statistics(num_experts: int, top_k: int) -> tuple[jax.Array, jax.Array]:
    """f = k/E and the co-occurrence of independent experts (C_ij = f_i f_j, C_ii = f_i): Σ = I, top-k routing."""
    f = jnp.full((num_experts,), top_k / num_experts, jnp.float32)
    return f, f[:, None] * f[None, :] + jnp.diag(f - f * f)


@register_router("mahalanobis")
class MahalanobisRouter(Router):
    """MP-MoE routing (reconstruction): greedy Mahalanobis selection over router probabilities."""

    OPTIONS = MahalanobisOptions

    def __init__(self, dim: int, num_experts: int, top_k: int, options: MahalanobisOptions, *, num_classes: int,
                 rngs: nnx.Rngs) -> None:
        super().__init__(dim, num_experts, top_k, options, num_classes=num_classes, rngs=rngs)
        self.kernel = nnx.Param(jax.nn.initializers.lecun_normal()(rngs.params(), (dim, num_experts), jnp.float32))
        # Like BatchNorm: False trains (greedy selection, statistics updated), True evaluates.
        self.use_running_average = False
        if options.statistics == "running":
            frequency, cooccurrence = independent_statistics(num_experts, top_k)
            self.frequency = CoOccurrence(frequency)
            self.cooccurrence = CoOccurrence(cooccurrence)

    def logits(self, h: jax.Array) -> jax.Array:
        return jnp.einsum("nd,de->ne", h, self.kernel[...], precision="highest")

    def sigma(self, logits: jax.Array, mask: jax.Array) -> jax.Array:
        """The covariance Σ [E, E] this call selects with (no gradient flows into it)."""
        if self.options.statistics == "running":
            frequency, cooccurrence = self.frequency[...], self.cooccurrence[...]
        else:
            _, picks = jax.lax.top_k(logits, self.top_k)
            frequency, cooccurrence = selection_statistics(picks, mask, self.num_experts)
        return jax.lax.stop_gradient(covariance(frequency, cooccurrence, self.options.covariance, self.options.ridge))

    def __call__(self, h: jax.Array, mask: jax.Array, rng: jax.Array | None = None) -> Routing:
        del rng
        logits = self.logits(h.astype(jnp.float32))
        if self.use_running_average and not self.options.select_at_inference:
            return top_k_routing(logits, self.top_k)
        probs = jax.lax.stop_gradient(jax.nn.softmax(logits, axis=-1))
        sigma = self.sigma(jax.lax.stop_gradient(logits), mask)
        indices, _ = jax.vmap(greedy_select, in_axes=(0, None, None))(probs, sigma, self.top_k)
        if self.options.statistics == "running" and not self.use_running_average:
            self._update_statistics(indices, mask)
        return gated_routing(logits, indices)

    def _update_statistics(self, indices: jax.Array, mask: jax.Array) -> None:
        frequency, cooccurrence = selection_statistics(jax.lax.stop_gradient(indices), mask, self.num_experts)
        beta = self.options.momentum
        self.frequency[...] = beta * self.frequency[...] + (1 - beta) * frequency
        self.cooccurrence[...] = beta * self.cooccurrence[...] + (1 - beta) * cooccurrence
