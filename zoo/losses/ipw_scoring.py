"""Task-specific strictly proper scoring rules for propensities, tailored to IPW estimation of the ATE.

Paper: "Tailoring Strictly Proper Scoring Rules for Downstream Tasks: An Application to Causal Inference"
(ICML 2026, arXiv 2606.03332). See docs/papers/ipw_scoring.md.

A binary proper scoring rule (as a loss) is fixed by a weight function w(q) > 0 on (0, 1) through a convex
potential G with G'' = w (Savage / Schervish; Buja, Stuetzle, Shen 2005):

    ℓ(q, y) = −G(q) − ψ(q) (y − q),     ψ = G' (the canonical link),   y ∈ {0, 1}, q ∈ (0, 1)

so ∂ℓ(q, 1)/∂q = −(1 − q) w(q), ∂ℓ(q, 0)/∂q = q w(q), and the expected loss under Bernoulli(p) has slope
w(q)(q − p): strictly minimised at q = p, with curvature w(p) there. With the canonical score f = ψ(q),
∂ℓ/∂f = q(f) − y and ∂²ℓ/∂f² = 1/w(q) > 0.

**RECONSTRUCTION.** The paper's code and equations were not available; the weight function below is derived
from the abstract's recipe (match the local curvature of the downstream error). The squared error of the IPW
weights at one unit, e(q) = p (1/q − 1/p)² + (1 − p)(1/(1 − q) − 1/(1 − p))², has curvature 2/p³ + 2/(1 − p)³
at q = p, hence (up to the factor 2)

    w(q) = a/q³ + b/(1 − q)³,   G(q) = a/(2q) + b/(2(1 − q)),   ψ(q) = (b q² − a (1 − q)²) / (2 q² (1 − q)²)

with outcome scales a = E[Y₁²|x], b = E[Y₀²|x] (default a = b = 1: ψ(q) = (2q − 1)/(2 q² (1 − q)²)). The rule
is pluggable: `IPWBiasRule` (w = 1/q² + 1/(1 − q)², the spec's alternative), `LogLossRule` (w = 1/(q(1 − q)):
log-loss and the logit link through the same code path) and `BrierRule` (w = 2), or any `ScoringRule`
subclass.

The inverse link ψ⁻¹ has no cheap closed form (a quartic for the IPW rule): it is computed by bisection on
(0, 1) (ψ is strictly increasing) and differentiated with a `jax.custom_jvp`, dq/df = 1/w(q), never through
the bisection. ψ and ℓ explode near 0 and 1 (ℓ(q, 1) → −∞ as q → 1): compute in float64 or pass `clip`.

Losses are elementwise, as optax's: `canonical_scoring_loss(scores, labels)` mirrors
`optax.losses.sigmoid_binary_cross_entropy(logits, labels)`. The objective `ipw_scoring` (registered) fits
any zoo classifier's propensity on a labelled dataset with labels in {0, 1}.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.losses.batch_fields import LABELLED_FIELDS, require_batch_fields
from icml26zoo.losses.objectives import Batch, pooled_logits
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_interval, check_positive

__all__ = ["BrierRule", "IPWBiasRule", "IPWRule", "LogLossRule", "RULES", "ScoringRule", "canonical_scoring_loss",
           "get_rule", "inverse_link", "ipw_scoring_objective", "scoring_loss", "sigmoid_scoring_loss"]

# Bisection halves (0, 1) this many times: enough for float64 to resolve propensities down to ~1e-12 to the
# last bit (2^-100 is far below their spacing); float32 is resolved long before.
BISECTION_STEPS = 100
# The registered objective's propensity range [q_min, 1 − q_min]: the spec's 1e-3 to 1e-2 against the
# unbounded reward of ℓ(q, 1) as q → 1 on separable data.
OBJECTIVE_CLIP = 1e-3


class ScoringRule:
    """A binary proper scoring rule given by its weight w = G'', potential G and canonical link ψ = G'.

    Subclasses are frozen dataclasses (hashable: they are static arguments of jitted functions) defining the
    three elementwise functions of q ∈ (0, 1) [...]."""

    name = "rule"

    def weight(self, q: jax.Array) -> jax.Array:
        raise NotImplementedError

    def potential(self, q: jax.Array) -> jax.Array:
        raise NotImplementedError

    def link(self, q: jax.Array) -> jax.Array:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class IPWRule(ScoringRule):
    """The IPW rule w(q) = a/q³ + b/(1 − q)³ (a = treated_scale = E[Y₁²|x], b = control_scale = E[Y₀²|x])."""

    treated_scale: float = 1.0
    control_scale: float = 1.0
    name = "ipw"

    def __post_init__(self) -> None:
        for field in ("treated_scale", "control_scale"):
            check_positive(f"{field} (an outcome's second moment E[Y²|x])", getattr(self, field), finite=True)

    def weight(self, q: jax.Array) -> jax.Array:
        return self.treated_scale / q**3 + self.control_scale / (1 - q) ** 3

    def potential(self, q: jax.Array) -> jax.Array:
        return self.treated_scale / (2 * q) + self.control_scale / (2 * (1 - q))

    def link(self, q: jax.Array) -> jax.Array:
        # One fraction rather than b/(2(1−q)²) − a/(2q²): no cancellation near ψ = 0.
        return (self.control_scale * q**2 - self.treated_scale * (1 - q) ** 2) / (2 * q**2 * (1 - q) ** 2)


@dataclasses.dataclass(frozen=True)
class IPWBiasRule(ScoringRule):
    """The spec's alternative curvature target: w(q) = 1/q² + 1/(1 − q)², G = −log q − log(1 − q)."""

    name = "ipw_bias"

    def weight(self, q: jax.Array) -> jax.Array:
        return 1 / q**2 + 1 / (1 - q) ** 2

    def potential(self, q: jax.Array) -> jax.Array:
        return -jnp.log(q) - jnp.log1p(-q)

    def link(self, q: jax.Array) -> jax.Array:
        return (2 * q - 1) / (q * (1 - q))


@dataclasses.dataclass(frozen=True)
class LogLossRule(ScoringRule):
    """Log-loss: w(q) = 1/(q(1 − q)), G = negative entropy, ψ = logit (the framework's regression check)."""

    name = "log"

    def weight(self, q: jax.Array) -> jax.Array:
        return 1 / (q * (1 - q))

    def potential(self, q: jax.Array) -> jax.Array:
        return q * jnp.log(q) + (1 - q) * jnp.log1p(-q)

    def link(self, q: jax.Array) -> jax.Array:
        return jnp.log(q) - jnp.log1p(-q)


@dataclasses.dataclass(frozen=True)
class BrierRule(ScoringRule):
    """Brier: w = 2, G = q² − q, ψ = 2q − 1; ℓ(q, y) = (q − y)². ψ maps onto (−1, 1) only: scores outside
    it invert to the nearest end of [0, 1]."""

    name = "brier"

    def weight(self, q: jax.Array) -> jax.Array:
        return 2 * jnp.ones_like(q)

    def potential(self, q: jax.Array) -> jax.Array:
        return q**2 - q

    def link(self, q: jax.Array) -> jax.Array:
        return 2 * q - 1


RULES: dict[str, ScoringRule] = {rule.name: rule for rule in (IPWRule(), IPWBiasRule(), LogLossRule(),
                                                             BrierRule())}


def get_rule(rule: str | ScoringRule) -> ScoringRule:
    """`rule` itself, or the rule registered in RULES under that name."""
    if isinstance(rule, ScoringRule):
        return rule
    if rule not in RULES:
        raise ValueError(f"rule must be a ScoringRule or one of {sorted(RULES)}, got {rule!r}")
    return RULES[rule]


def _is_concrete(x: jax.Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _float_array(name: str, x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must be a floating-point array, got dtype {x.dtype}")
    return x


def _check_labels(labels: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """labels as an array; they must broadcast to `shape`, and concrete labels must be 0 or 1."""
    labels = jnp.asarray(labels)
    try:
        broadcast = jnp.broadcast_shapes(labels.shape, shape)
    except ValueError:
        broadcast = None
    if broadcast != tuple(shape):
        raise ValueError(f"labels must broadcast to the predictions' shape {tuple(shape)}, got shape {labels.shape}")
    if _is_concrete(labels):
        # numpy, not jnp: a concrete array closed over by a traced function would turn into a tracer.
        values = np.asarray(labels)
        bad = values[(values != 0) & (values != 1)]
        if bad.size:
            raise ValueError(f"labels (treatment indicators) must be 0 or 1, got values such as {bad[:3].tolist()}")
    return labels


def _check_clip(clip: float) -> None:
    check_interval("clip (the propensity floor q_min)", clip, 0, 0.5, closed="left")


def scoring_loss(probs: jax.Array, labels: jax.Array, rule: str | ScoringRule = "ipw", *,
                 clip: float = 0.0) -> jax.Array:
    """ℓ(q, y) = −G(q) − ψ(q)(y − q) per element: probs q [...] float, labels y [...] in {0, 1} -> [...].

    clip: q_min; q is clipped to [q_min, 1 − q_min] first (zero gradient outside). Concrete probs must lie
    in (0, 1), or in [0, 1] when clip > 0; concrete labels must be 0 or 1 (a ValueError names the argument).
    """
    rule = get_rule(rule)
    _check_clip(clip)
    probs = _float_array("probs", probs)
    if _is_concrete(probs):
        values = np.asarray(probs)
        inside = (values >= 0) & (values <= 1) if clip > 0 else (values > 0) & (values < 1)
        if not inside.all():
            interval = "[0, 1] (clip > 0)" if clip > 0 else "the open interval (0, 1)"
            raise ValueError(f"probs (propensities) must lie in {interval}, got values such as "
                             f"{values[~inside][:3].tolist()}")
    if clip > 0:
        probs = jnp.clip(probs, clip, 1 - clip)
    return _unchecked_loss(probs, labels, rule)


# Jitted (the rule static) so eager calls reuse one compiled loop per rule, shape and dtype.
@functools.partial(jax.jit, static_argnums=0)
def _bisect(rule: ScoringRule, scores: jax.Array) -> jax.Array:
    """q ∈ [0, 1] with ψ(q) = scores, by BISECTION_STEPS halvings of [0, 1] (ψ strictly increasing)."""

    def halve(_, bounds):
        low, high = bounds
        middle = 0.5 * (low + high)
        below = rule.link(middle) < scores
        return jnp.where(below, middle, low), jnp.where(below, high, middle)

    low, high = jax.lax.fori_loop(0, BISECTION_STEPS, halve, (jnp.zeros_like(scores), jnp.ones_like(scores)))
    return jnp.where(jnp.isnan(scores), jnp.nan, 0.5 * (low + high))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _inverse_link(rule: ScoringRule, scores: jax.Array) -> jax.Array:
    return _bisect(rule, scores)


@_inverse_link.defjvp
def _inverse_link_jvp(rule, primals, tangents):
    (scores,), (scores_dot,) = primals, tangents
    probs = _inverse_link(rule, scores)
    # The inverse function theorem: dq/df = 1 / ψ'(q) = 1 / w(q); never differentiate the bisection.
    return probs, scores_dot / rule.weight(probs)


def inverse_link(scores: jax.Array, rule: str | ScoringRule = "ipw") -> jax.Array:
    """q = ψ⁻¹(f): scores f [...] float -> propensities [...] in (0, 1), with dq/df = 1/w(q)."""
    return _inverse_link(get_rule(rule), _float_array("scores", scores))


def canonical_scoring_loss(scores: jax.Array, labels: jax.Array, rule: str | ScoringRule = "ipw", *,
                           clip: float = 0.0) -> jax.Array:
    """ℓ(ψ⁻¹(f), y) per element, the rule through its canonical link: scores f [...], labels [...] -> [...].

    Its gradient is q(f) − y and it is convex in f (for LogLossRule: optax's sigmoid_binary_cross_entropy).
    """
    probs = inverse_link(scores, rule)
    _check_clip(clip)
    if clip > 0:
        probs = jnp.clip(probs, clip, 1 - clip)
    return _unchecked_loss(probs, labels, rule)


def sigmoid_scoring_loss(logits: jax.Array, labels: jax.Array, rule: str | ScoringRule = "ipw", *,
                         clip: float = 0.0) -> jax.Array:
    """ℓ(sigmoid(z), y) per element: the rule through the logistic (non-canonical) link, still proper.
    logits z [...], labels [...] -> [...]; clip as in `scoring_loss` (sigmoid saturates to 0 or 1)."""
    logits = _float_array("logits", logits)
    _check_clip(clip)
    probs = jax.nn.sigmoid(logits)
    if clip > 0:
        probs = jnp.clip(probs, clip, 1 - clip)
    return _unchecked_loss(probs, labels, rule)


def _unchecked_loss(probs: jax.Array, labels: jax.Array, rule: str | ScoringRule) -> jax.Array:
    # Propensities made by a link are in [0, 1] by construction (an end only where it saturates); the labels
    # are still checked when they are concrete.
    labels = _check_labels(labels, probs.shape).astype(probs.dtype)
    return _savage_loss(get_rule(rule), probs, labels)


@functools.partial(jax.jit, static_argnums=0)
def _savage_loss(rule: ScoringRule, probs: jax.Array, labels: jax.Array) -> jax.Array:
    """ℓ(q, y) = −G(q) − ψ(q)(y − q), the one formula every rule goes through."""
    return -rule.potential(probs) - rule.link(probs) * (labels - probs)


@register_objective("ipw_scoring")
def ipw_scoring_objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Propensity fitting with the IPW rule through its canonical link, on any registered classifier.

    batch["labels"] [B] in {0, 1} is the treatment; the score is f = pooled logit 1 − pooled logit 0 (the
    classification objective's mean-pooled logits), q = ψ⁻¹(f) clipped to [OBJECTIVE_CLIP, 1 − OBJECTIVE_CLIP].
    loss = Σ_rows ℓ(q, T) / Σ_rows (rows holding a token); correct counts q > 1/2 agreeing with T. A concrete
    label outside {0, 1} raises ValueError; under jit such a row makes the loss NaN (the trainer then stops).
    """
    del rng  # Deterministic.
    require_batch_fields("ipw_scoring", batch, LABELLED_FIELDS, dataset="topics")
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])
    pooled, row_weight = pooled_logits(logits, batch["segment_ids"])
    labels = batch["labels"]
    if _is_concrete(labels) and _is_concrete(row_weight):
        values, rows = np.asarray(labels), np.asarray(row_weight)
        if not np.all((values == 0) | (values == 1) | (rows == 0)):
            raise ValueError(f"batch['labels'] must be 0 or 1 (the treatment) on every row, got {values.tolist()}")
    valid = (labels == 0) | (labels == 1)
    probs = jnp.clip(inverse_link(pooled[:, 1] - pooled[:, 0], "ipw"), OBJECTIVE_CLIP, 1 - OBJECTIVE_CLIP)
    treated = jnp.where(valid, labels, 0).astype(jnp.float32)
    losses = _unchecked_loss(probs, treated, "ipw")
    losses = jnp.where(valid | (row_weight == 0), losses, jnp.nan)
    correct = ((probs > 0.5) == (treated > 0.5)).astype(jnp.float32)
    loss_sum = jnp.sum(jnp.where(row_weight > 0, losses, 0.0))
    weight = jnp.sum(row_weight)
    metrics = {"loss_sum": loss_sum, "weight": weight, "correct": jnp.sum(correct * row_weight)}
    return loss_sum / jnp.maximum(weight, 1.0), metrics
