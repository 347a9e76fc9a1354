"""MP-MoE's router (ICML 2026, "Mahalanobis-Pruned Mixture-of-Experts"): a diversity-aware greedy choice
of k experts per token whose similarity comes from expert co-occurrence.

RECONSTRUCTION: no code was published. From the paper's abstract and public summaries we know the
objective is Mahalanobis-distance based, the covariance is the expert co-occurrence matrix, and the greedy
uses incremental Cholesky updates; the paper's exact selection gain is not recoverable. The rest is ours and
kept swappable (`greedy_select(..., gain=...)`):

  p = softmax(h W_r) [E];   Σ [E, E] the experts' correlation (below);   L = diag(p) Σ diag(p)
  value of a set S: log det L_SS (greedy MAP of a DPP-like objective: quality p, similarity Σ)
  greedy: add j* = argmax_j Δ_j,  Δ_j = p_j² (Σ_jj − Σ_jS Σ_SS⁻¹ Σ_Sj) = det L_{S∪j} / det L_S

The Schur complement Σ_jj − Σ_jS Σ_SS⁻¹ Σ_Sj is the squared Mahalanobis (Σ-metric) distance of expert j from
the span of the chosen experts, so a perfect twin of a chosen expert gains only p_j² · O(λ) while an
uncorrelated expert gains p_j² (1 + λ). An earlier reconstruction used Δ_j = (p_j − Σ_jS Σ_SS⁻¹ p_S)² / schur_j
(the increase of p_Sᵀ Σ_SS⁻¹ p_S); it rewarded a twin whose probability differs from what its correlation
predicts (perfect twins, p = [.30, .15, .25, .15, .15]: it chose {0, 1}) and was replaced (issue 31).
Σ comes from selection statistics f (usage, [E]) and C (co-occurrence, [E, E]): "phi" correlation
(C − f fᵀ) / sqrt(f(1−f) f(1−f)ᵀ) or "normalized" D^-½ C D^-½, plus a ridge λ I. Similarity enters through
Σ_ij², so strongly anti-correlated experts count as similar too (for phi this needs both to be used often).

With Σ ∝ I (or any equicorrelated Σ) the greedy returns exactly top-k by p. Gates are the softmax of the
chosen logits, so the router is trained as a top-k router; the selection itself carries no gradient.
Statistics are either "running" (non-trainable `CoOccurrence` state, exponential moving averages of the
router's own selections, updated when `use_running_average` is False), or "batch" (estimated from the current
batch's top-k picks, no state: what a parameters-only trainer can carry). At inference (`use_running_average`
True) plain top-k is used unless `select_at_inference`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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


def logdet_gain(p: jax.Array, schur: jax.Array) -> jax.Array:
    """Gain p_j² · schur_j [E] = det L_{S∪j} / det L_S of adding each expert (p [E], schur [E] ≥ 0)."""
    return p * p * schur


# A selection gain: (p [E], Schur complements [E] of Σ given the chosen set) -> gains [E] ≥ 0.
SelectionGain = Callable[[jax.Array, jax.Array], jax.Array]


def greedy_select(p: jax.Array, sigma: jax.Array, top_k: int,
                  gain: SelectionGain = logdet_gain) -> tuple[jax.Array, jax.Array]:
    """Greedy selection for one token: p [E], sigma [E, E] SPD -> (indices [k] int32, gains [k]).

    Keeps V = L⁻¹ Σ_S,: ([k, E], rows filled one per step), where L is the Cholesky factor of Σ_SS; adding
    expert j appends the row [V_:,j, sqrt(Σ_jj − ‖V_:,j‖²)] to L, so each step costs O(k·E) (the incremental
    Cholesky update) and gives every expert's Schur complement Σ_jj − ‖V_:,j‖². With the default `gain` the
    returned gains are det L_{S∪j} / det L_S ≥ 0 (L = diag(p) Σ diag(p)).
    """
    num_experts = p.shape[0]
    basis = jnp.zeros((top_k, num_experts), p.dtype)
    chosen = jnp.zeros((num_experts,), jnp.bool_)
    diagonal = jnp.diagonal(sigma)
    indices, gains = [], []
    for step in range(top_k):
        # Elementwise sums rather than matmuls: exact float32 on every backend.
        schur = jnp.maximum(diagonal - jnp.sum(basis * basis, axis=0), 1e-12)
        step_gain = jnp.where(chosen, -jnp.inf, gain(p, schur))
        j = jnp.argmax(step_gain)
        new_row = (sigma[j] - jnp.sum(basis[:, j][:, None] * basis, axis=0)) / jnp.sqrt(schur[j])
        basis = basis.at[step].set(new_row)
        chosen = chosen.at[j].set(True)
        indices.append(j)
        gains.append(step_gain[j])
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
    """MP-MoE routing (reconstruction): greedy log-det (Mahalanobis-pruned) selection over router
    probabilities."""

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
