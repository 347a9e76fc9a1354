"""Routers of the mixture-of-experts feed-forward: which k experts each token visits, and with what weight.

Every router maps hidden states h [N, D] (N tokens, flattened) to a `Routing`: the chosen experts
indices [N, k], combination weights gates [N, k], and its scores logits / probs [N, E] (E experts).
`Router.combine` may replace the gates once the experts' outputs are known (ConfSMoE's confidence).
Routers get the usual auxiliary losses (`balance_losses`), weighted by the layer: the Switch
load-balancing loss (`BALANCED = True`) and the ST-MoE router z-loss (`Z_LOSS = True`).

Registered here: "topk_softmax" (softmax gate), "gaussian" and "laplacian" (distance gates). ConfSMoE's
"confidence" router is in `zoo.moe.confidence`, MP-MoE's "mahalanobis" router in `zoo.moe.mahalanobis`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.moe.registry import register_router
from icml26zoo.validation import check_choice


class Routing(NamedTuple):
    """A router's decision for N tokens over E experts, k per token."""

    indices: jax.Array  # [N, k] int32, distinct experts per token
    gates: jax.Array  # [N, k] float32 combination weights
    logits: jax.Array  # [N, E] float32 router scores
    probs: jax.Array  # [N, E] float32 softmax of the scores


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A router without options."""


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of values [N, ...] over the tokens where mask [N] is True (0 when none is)."""
    weight = mask.astype(jnp.float32).reshape(mask.shape + (1,) * (values.ndim - 1))
    return jnp.sum(values * weight, axis=0) / jnp.maximum(jnp.sum(mask.astype(jnp.float32)), 1.0)


def expert_load(indices: jax.Array, mask: jax.Array, num_experts: int) -> jax.Array:
    """Share of the routed (token, slot) pairs each expert receives: indices [N, k], mask [N] -> [E], sums to 1."""
    counts = jnp.sum(jax.nn.one_hot(indices, num_experts, dtype=jnp.float32), axis=1)  # [N, E]
    return masked_mean(counts, mask) / indices.shape[1]


def balance_losses(routing: Routing, mask: jax.Array) -> dict[str, jax.Array]:
    """Auxiliary losses of a routing over the real tokens (mask [N] bool), float32 scalars.

    load_balance = E · Σ_e f_e · P_e (Switch Transformer, arXiv 2101.03961), f_e the share of routed pairs,
    P_e the mean router probability; equals 1 under uniform routing. router_z = mean logsumexp(logits)²
    (ST-MoE, arXiv 2202.08906).
    """
    num_experts = routing.probs.shape[-1]
    load = expert_load(routing.indices, mask, num_experts)
    mean_prob = masked_mean(routing.probs, mask)
    z = jax.nn.logsumexp(routing.logits, axis=-1) ** 2
    return {"load_balance": num_experts * jnp.sum(load * mean_prob), "router_z": masked_mean(z, mask)}


def top_k_routing(logits: jax.Array, top_k: int, *, selection_scores: jax.Array | None = None) -> Routing:
    """Top-k of `selection_scores` (default the logits [N, E]); gates = softmax of the chosen logits."""
    scores = logits if selection_scores is None else selection_scores
    _, indices = jax.lax.top_k(jax.lax.stop_gradient(scores), top_k)
    return gated_routing(logits, indices.astype(jnp.int32))


def gated_routing(logits: jax.Array, indices: jax.Array) -> Routing:
    """A Routing for chosen indices [N, k]: gates are the softmax of the logits [N, E] restricted to them."""
    chosen = jnp.take_along_axis(logits, indices, axis=-1)
    return Routing(indices, jax.nn.softmax(chosen, axis=-1), logits, jax.nn.softmax(logits, axis=-1))


class Router(nnx.Module):
    """Base: `router(h [N, D], mask [N] bool, rng=None) -> Routing`; subclasses implement `logits`.

    Subclasses set OPTIONS (their typed options dataclass), BALANCED (whether the load-balancing loss
    applies) and Z_LOSS (whether the z-loss does: it bounds linear logits, not distance gates' scores).
    Scores are computed in float32 whatever the compute dtype.
    """

    OPTIONS: type = NoOptions
    BALANCED: bool = True
    Z_LOSS: bool = True

    def __init__(self, dim: int, num_experts: int, top_k: int, options: Any, *, num_classes: int,
                 rngs: nnx.Rngs) -> None:
        del num_classes  # Only the confidence router has a class head.
        self.dim, self.num_experts, self.top_k, self.options = dim, num_experts, top_k, options

    def logits(self, h: jax.Array) -> jax.Array:
        raise NotImplementedError

    def __call__(self, h: jax.Array, mask: jax.Array, rng: jax.Array | None = None) -> Routing:
        del mask, rng  # Stateless and deterministic.
        return top_k_routing(self.logits(h.astype(jnp.float32)), self.top_k)

    def combine(self, routing: Routing, slot_outputs: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(combination weights [N, k], extra outputs) given the experts' outputs [N, k, D]; default: the gates."""
        del slot_outputs
        return routing.gates, {}


def _router_kernel(dim: int, num_experts: int, rngs: nnx.Rngs) -> nnx.Param:
    """[D, E] float32, variance 1/D (LeCun normal), as nnx.Linear initializes."""
    return nnx.Param(jax.nn.initializers.lecun_normal()(rngs.params(), (dim, num_experts), jnp.float32))


# Where the softmax gate's probabilities are normalized: over the k chosen logits (Mixtral, ConfSMoE's code) or
# over all E, taken at the chosen experts without renormalizing (Switch's top-1, GShard).
GATE_NORMALIZATIONS = ("chosen", "all")


@dataclasses.dataclass(frozen=True)
class TopKSoftmaxOptions:
    """Options of the "topk_softmax" router."""

    # "chosen": gates = softmax over the k chosen logits (sum to 1; with k = 1 the gate is 1 and the router gets
    # no gradient). "all": gates = softmax over all E logits at the chosen experts (Switch/GShard), so every
    # step pushes probability toward the experts that were used, the loop that collapses unbalanced routing.
    normalize: str = "chosen"

    def __post_init__(self) -> None:
        check_choice("topk_softmax router option 'normalize'", self.normalize, GATE_NORMALIZATIONS)


@register_router("topk_softmax")
class TopKSoftmaxRouter(Router):
    """The softmax gate: logits = h W_r [N, E]; top-k experts; gates = softmax over the k chosen logits, or over
    all E logits at the chosen experts (option normalize="all")."""

    OPTIONS = TopKSoftmaxOptions

    def __init__(self, dim: int, num_experts: int, top_k: int, options: Any, *, num_classes: int,
                 rngs: nnx.Rngs) -> None:
        super().__init__(dim, num_experts, top_k, options, num_classes=num_classes, rngs=rngs)
        self.kernel = _router_kernel(dim, num_experts, rngs)

    def logits(self, h: jax.Array) -> jax.Array:
        return jnp.einsum("nd,de->ne", h, self.kernel[...], precision="highest")

    def __call__(self, h: jax.Array, mask: jax.Array, rng: jax.Array | None = None) -> Routing:
        routing = super().__call__(h, mask, rng)
        if self.options.normalize == "all":
            routing = routing._replace(gates=jnp.take_along_axis(routing.probs, routing.indices, axis=-1))
        return routing


@dataclasses.dataclass(frozen=True)
class GaussianOptions:
    """Gaussian gate options: whether the per-expert scale σ_e and prior π_e are learned (else fixed)."""

    learn_scale: bool = True
    learn_prior: bool = True


@register_router("gaussian")
class GaussianRouter(Router):
    """Gaussian gate: ℓ_e = −‖h − μ_e‖² / (2σ_e²) + log π_e (isotropic), gates = softmax over the top-k ℓ.

    Written from the Gaussian-gated MoE literature (Nguyen et al.), not from ConfSMoE's code (which has no
    Gaussian gate). σ_e² starts at D so that initial logits are O(1) for unit-scale h; π starts uniform.
    """

    OPTIONS = GaussianOptions
    Z_LOSS = False

    def __init__(self, dim: int, num_experts: int, top_k: int, options: GaussianOptions, *, num_classes: int,
                 rngs: nnx.Rngs) -> None:
        super().__init__(dim, num_experts, top_k, options, num_classes=num_classes, rngs=rngs)
        self.means = nnx.Param(jax.random.normal(rngs.params(), (num_experts, dim), jnp.float32))
        self.initial_log_variance = math.log(dim)
        log_variance = jnp.full((num_experts,), self.initial_log_variance, jnp.float32)
        # None: fixed at the initial value (σ_e² = D, uniform π).
        self.log_variance = nnx.Param(log_variance) if options.learn_scale else None
        self.prior_logits = nnx.Param(jnp.zeros((num_experts,), jnp.float32)) if options.learn_prior else None

    def logits(self, h: jax.Array) -> jax.Array:
        squared = jnp.sum((h[:, None, :] - self.means[...][None]) ** 2, axis=-1)  # [N, E]
        variance = (jnp.exp(self.log_variance[...]) if self.log_variance is not None
                    else jnp.float32(math.exp(self.initial_log_variance)))
        log_prior = (jax.nn.log_softmax(self.prior_logits[...]) if self.prior_logits is not None
                     else jnp.float32(-math.log(self.num_experts)))
        return -squared / (2.0 * variance) + log_prior


@register_router("laplacian")
class LaplacianRouter(Router):
    """Laplace gate (FuseMoE, arXiv 2402.03226): ℓ_e = −‖h − w_e‖₂, gates = softmax over the top-k ℓ.

    Written from FuseMoE's formula, not from ConfSMoE's code. The norm is floored at 1e-12 inside the root
    so that its gradient stays finite when h = w_e.
    """

    Z_LOSS = False

    def __init__(self, dim: int, num_experts: int, top_k: int, options: Any, *, num_classes: int,
                 rngs: nnx.Rngs) -> None:
        super().__init__(dim, num_experts, top_k, options, num_classes=num_classes, rngs=rngs)
        self.centers = nnx.Param(jax.random.normal(rngs.params(), (num_experts, dim), jnp.float32))

    def logits(self, h: jax.Array) -> jax.Array:
        squared = jnp.sum((h[:, None, :] - self.centers[...][None]) ** 2, axis=-1)
        return -jnp.sqrt(jnp.maximum(squared, 1e-12))
