"""ConfSMoE's router (ICML 2026, "ConfSMoE: Handling Missing and Multi-Modal Inputs with Confidence-Guided
Sparse Expert Selection"): a noisy top-k gate only *selects* experts; each chosen expert's output is
weighted by its own confidence c_e(o) = sigmoid(w_eᵀ LN_e(o) + b_e) ∈ (0, 1), not by the softmax
(weights are not normalized). The confidence is regressed on the probability that a shared class head
gives the true class, P(o)[y] (`confidence_loss`), and no load-balancing loss is added.

Written from the official code's maths (docs/papers.md). Deviations: the per-token confidence
(the code's TokenLevelConf=True) is the only mode; the batch-mean mode is not implemented.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.moe.registry import register_router
from icml26zoo.moe.routers import Router, Routing, top_k_routing
from icml26zoo.validation import check_int, check_non_negative

NOISE_FLOOR = 1e-2
LAYER_NORM_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class ConfidenceOptions:
    """Options of the "confidence" router."""

    # Classes C of the shared probability head; 0 takes the host's (the LM's vocabulary size).
    num_classes: int = 0
    # Shazeer-style noisy gating, applied only when the layer is called with an rng (training).
    noise: bool = True
    # Stop the gradient through the target P(o)[y]; False is the reference code (the MSE pulls both ways).
    stop_gradient_target: bool = False
    # Weight of the confidence MSE in the training loss (the reference adds it with weight 1).
    confidence_weight: float = 1.0

    def __post_init__(self) -> None:
        check_int("confidence router option 'num_classes'", self.num_classes, minimum=0)
        check_non_negative("confidence router option 'confidence_weight'", self.confidence_weight)


@register_router("confidence")
class ConfidenceRouter(Router):
    """Selection by a (noisy) linear gate, combination by per-expert confidence nets on the experts' outputs.

    Parameters: gate W_g [D, E] and noise W_n [D, E]; per expert e a LayerNorm (scale, bias [E, D]) and a
    Linear(D -> 1) (w [E, D], b [E]); one shared class head W_p [D, C], b_p [C].
    """

    OPTIONS = ConfidenceOptions
    # The reference adds neither a balancing loss nor a z-loss; as there, the gate gets no gradient (its
    # softmax weights nothing), so it selects with its initial (noisy) projection.
    BALANCED = False
    Z_LOSS = False

    def __init__(self, dim: int, num_experts: int, top_k: int, options: ConfidenceOptions, *, num_classes: int,
                 rngs: nnx.Rngs) -> None:
        super().__init__(dim, num_experts, top_k, options, num_classes=num_classes, rngs=rngs)
        classes = options.num_classes or num_classes
        if classes < 2:
            raise ValueError(f"confidence router needs num_classes >= 2 for its class head, got {classes}")
        lecun = jax.nn.initializers.lecun_normal()
        self.gate = nnx.Param(lecun(rngs.params(), (dim, num_experts), jnp.float32))
        self.noise_gate = nnx.Param(jnp.zeros((dim, num_experts), jnp.float32))
        self.norm_scale = nnx.Param(jnp.ones((num_experts, dim), jnp.float32))
        self.norm_bias = nnx.Param(jnp.zeros((num_experts, dim), jnp.float32))
        self.confidence_kernel = nnx.Param(lecun(rngs.params(), (num_experts, dim), jnp.float32))
        self.confidence_bias = nnx.Param(jnp.zeros((num_experts,), jnp.float32))
        self.class_kernel = nnx.Param(lecun(rngs.params(), (dim, classes), jnp.float32))
        self.class_bias = nnx.Param(jnp.zeros((classes,), jnp.float32))

    def logits(self, h: jax.Array) -> jax.Array:
        return jnp.einsum("nd,de->ne", h, self.gate[...], precision="highest")

    def __call__(self, h: jax.Array, mask: jax.Array, rng: jax.Array | None = None) -> Routing:
        """Noisy top-k selection (noise only with an rng); gates are placeholders until `combine`."""
        del mask
        h = h.astype(jnp.float32)
        logits = self.logits(h)
        selection = logits
        if rng is not None and self.options.noise:
            spread = jax.nn.softplus(jnp.einsum("nd,de->ne", h, self.noise_gate[...], precision="highest"))
            selection = logits + jax.random.normal(rng, logits.shape) * (spread + NOISE_FLOOR)
        return top_k_routing(logits, self.top_k, selection_scores=selection)

    def confidence(self, indices: jax.Array, slot_outputs: jax.Array) -> jax.Array:
        """c_e(o) = sigmoid(w_eᵀ LN_e(o) + b_e): indices [N, k], slot_outputs [N, k, D] -> [N, k] in (0, 1)."""
        o = slot_outputs.astype(jnp.float32)
        mean = jnp.mean(o, axis=-1, keepdims=True)
        normalized = (o - mean) * jax.lax.rsqrt(jnp.var(o, axis=-1, keepdims=True) + LAYER_NORM_EPS)
        normalized = normalized * self.norm_scale[...][indices] + self.norm_bias[...][indices]
        score = jnp.sum(normalized * self.confidence_kernel[...][indices], axis=-1) + self.confidence_bias[...][indices]
        return jax.nn.sigmoid(score)

    def class_logits(self, slot_outputs: jax.Array) -> jax.Array:
        """The shared class head on each expert output: [N, k, D] -> logits [N, k, C] float32."""
        o = slot_outputs.astype(jnp.float32)
        return jnp.einsum("nkd,dc->nkc", o, self.class_kernel[...], precision="highest") + self.class_bias[...]

    def combine(self, routing: Routing, slot_outputs: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Weights = confidence [N, k]; extras: "confidence" [N, k] and "class_logits" [N, k, C] for the loss."""
        confidence = self.confidence(routing.indices, slot_outputs)
        return confidence, {"confidence": confidence, "class_logits": self.class_logits(slot_outputs)}


def confidence_targets(class_logits: jax.Array, labels: jax.Array) -> jax.Array:
    """P(o)[y]: class_logits [..., k, C], labels [...] int -> probability of the true class [..., k] in [0, 1]."""
    probs = jax.nn.softmax(class_logits.astype(jnp.float32), axis=-1)
    index = jnp.broadcast_to(labels[..., None, None], probs.shape[:-1] + (1,))
    return jnp.take_along_axis(probs, index, axis=-1)[..., 0]


def confidence_loss(
    confidence: jax.Array, class_logits: jax.Array, labels: jax.Array, weights: jax.Array, *,
    stop_gradient_target: bool = False,
) -> jax.Array:
    """Mean squared error between confidence [..., k] and P(o)[y] over routed pairs of weighted tokens.

    labels [...] int, weights [...] float (0 on padding) -> float32 scalar: Σ w (c − p)² / (k · Σ w).
    """
    targets = confidence_targets(class_logits, labels)
    if stop_gradient_target:
        targets = jax.lax.stop_gradient(targets)
    squared = jnp.sum((confidence.astype(jnp.float32) - targets) ** 2, axis=-1)
    weights = weights.astype(jnp.float32)
    return jnp.sum(squared * weights) / jnp.maximum(jnp.sum(weights) * confidence.shape[-1], 1.0)
