"""Divergence Decoding: inference-time unlearning by steering a model's logits with two small auxiliary models.

Paper: Merchant, Levy, "Divergence Decoding: Inference-Time Unlearning via Auxiliary Models" (ICML 2026,
arXiv 2605.31293). See docs/papers/divergence_decoding.md.

At every position, with z_big, z_ret, z_fgt the next-token logits of the base model, of an auxiliary model
trained on the retain data only and of the same auxiliary model trained on all the data (forget set
included), the steered logits are

    z_DD = z_big + α (z_ret − z_fgt),

then any usual decoding (greedy, temperature, top-k, top-p). z_ret − z_fgt is negative on the tokens the
auxiliary model learned only from the forget data. The rule is linear in log-probabilities: replacing any
model's logits by its log-softmax (a per-position constant shift) leaves softmax(z_DD) unchanged.

Also here: the paper code's two variants (signed-log combination; suppression of the k tokens with the most
negative z_ret − z_fgt), a `LogitsProcessor` that advances both auxiliary caches in lockstep with the base
model (`icml26zoo.decode.generate(..., processor=DivergenceDecoding(...))`), teacher-forced steered logits
for scoring, and the KL loss that distils the steered distribution back into the base model.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.validation import check_choice, check_int, check_non_negative

__all__ = ["VARIANTS", "DivergenceDecoding", "distillation_loss", "divergence_logits", "signed_log",
           "signed_log_divergence_logits", "signed_log_inverse", "steered_logits", "top_k_suppression"]

VARIANTS = ("linear", "signed_log", "top_k")


def _check_same_shape(base: jax.Array, retain: jax.Array, forget: jax.Array) -> None:
    for name, value in (("retain_logits", retain), ("forget_logits", forget)):
        if value.shape != base.shape:
            raise ValueError(f"{name} must have the base logits' shape {tuple(base.shape)} (same vocabulary and "
                             f"positions), got {tuple(value.shape)}")


def divergence_logits(base: jax.Array, retain: jax.Array, forget: jax.Array, *, alpha: float) -> jax.Array:
    """z_big + α (z_ret − z_fgt); all [..., V] float; α may be traced (a float >= 0)."""
    _check_same_shape(base, retain, forget)
    return base + alpha * (retain - forget)


def signed_log(x: jax.Array) -> jax.Array:
    """slog(x) = sign(x) · log(|x| + 1)."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def signed_log_inverse(y: jax.Array) -> jax.Array:
    """slog⁻¹(y) = sign(y) · (exp|y| − 1)."""
    return jnp.sign(y) * jnp.expm1(jnp.abs(y))


def signed_log_divergence_logits(base: jax.Array, retain: jax.Array, forget: jax.Array, *, alpha: float) -> jax.Array:
    """The paper code's signed-log variant: slog⁻¹(slog(z_big) + α (slog(z_ret) − slog(z_fgt))). Not shift
    invariant: it acts on raw logits."""
    _check_same_shape(base, retain, forget)
    return signed_log_inverse(signed_log(base) + alpha * (signed_log(retain) - signed_log(forget)))


def top_k_suppression(
    base: jax.Array, retain: jax.Array, forget: jax.Array, *, k: int, vocabulary_mask: jax.Array | None = None
) -> jax.Array:
    """The paper code's top-k variant: z_big set to −inf on the k tokens with the most negative z_ret − z_fgt.

    `vocabulary_mask` [V] bool (optional) limits the candidates to those tokens (e.g. the forget set's): no
    other token is ever suppressed, even when fewer than k tokens are candidates (the reference zeroes the
    difference outside, which could suppress an outside token with difference 0). k = 0 returns z_big
    unchanged. Ties at the k-th difference follow `jax.lax.top_k`'s order (lower index first).
    """
    _check_same_shape(base, retain, forget)
    check_int("k", k, minimum=0)
    if k > base.shape[-1]:
        raise ValueError(f"k must be at most the vocabulary size {base.shape[-1]}, got {k}")
    if k == 0:
        return base
    difference = retain - forget
    if vocabulary_mask is not None:
        difference = jnp.where(vocabulary_mask, difference, jnp.inf)
    _, suppressed = jax.lax.top_k(-difference, k)  # [..., k]
    hit = jnp.any(jax.nn.one_hot(suppressed, base.shape[-1], dtype=jnp.bool_), axis=-2)  # [..., V]
    if vocabulary_mask is not None:
        hit = hit & vocabulary_mask
    return jnp.where(hit, -jnp.inf, base)


def _vocab_size(model: Any, name: str) -> int:
    cfg = getattr(model, "cfg", None)
    size = getattr(cfg, "vocab_size", None)
    if not isinstance(size, int):
        raise ValueError(f"{name} must be a zoo LM with cfg.vocab_size (e.g. from build_model), got "
                         f"{type(model).__name__}")
    return size


def check_vocabularies(base: Any, retain: Any, forget: Any) -> int:
    """The shared vocabulary size; ValueError naming the auxiliary model whose vocabulary differs from base's."""
    size = _vocab_size(base, "base")
    for name, model in (("retain", retain), ("forget", forget)):
        other = _vocab_size(model, name)
        if other != size:
            raise ValueError(f"{name} model has vocab_size {other} but the base model has {size}: Divergence "
                             f"Decoding needs one tokenizer (same vocabulary) for all three models")
    return size


class DivergenceDecoding(nnx.Module):
    """The steering rule as a `LogitsProcessor` around a retain and a forget auxiliary model.

    Args:
      base: the model whose logits are steered (only its vocabulary is checked here: `generate` runs it).
      retain: auxiliary LM trained on the retain data only.
      forget: the same auxiliary LM trained on all the data (forget set included).
      alpha: the steering strength α >= 0 (the paper: 1.5 on TOFU, 0.9 on MUSE-News; 0 = the base model).
      variant: "linear" (the rule above), "signed_log" or "top_k" (suppress `k` tokens; alpha unused).
      k: tokens suppressed per position by the "top_k" variant.
    """

    def __init__(self, base: nnx.Module, retain: nnx.Module, forget: nnx.Module, *, alpha: float,
                 variant: str = "linear", k: int = 0) -> None:
        check_vocabularies(base, retain, forget)
        check_non_negative("alpha", alpha, finite=True)
        check_choice("variant", variant, VARIANTS)
        check_int("k", k, minimum=0)
        self.retain, self.forget = retain, forget
        # A variable, not a static attribute: decoding at another alpha reuses the compiled loop.
        self.alpha = nnx.Variable(jnp.asarray(alpha, jnp.float32))
        self.variant, self.k = variant, k

    def combine(self, base: jax.Array, retain: jax.Array, forget: jax.Array) -> jax.Array:
        """The steered logits [..., V] from the three models' logits [..., V]."""
        if self.variant == "linear":
            return divergence_logits(base, retain, forget, alpha=self.alpha[...])
        if self.variant == "signed_log":
            return signed_log_divergence_logits(base, retain, forget, alpha=self.alpha[...])
        return top_k_suppression(base, retain, forget, k=self.k)

    def init_state(self, batch_size: int, max_len: int) -> tuple[Any, Any]:
        """Empty decode caches of both auxiliary models."""
        return self.retain.init_cache(batch_size, max_len), self.forget.init_cache(batch_size, max_len)

    def __call__(self, logits: jax.Array, tokens: jax.Array, state: tuple[Any, Any]) -> tuple[jax.Array, Any]:
        """Feeds tokens [B, T] to both auxiliary caches; steers the base logits [B, T, V]."""
        retain_logits, retain_cache = self.retain.decode(tokens, state[0])
        forget_logits, forget_cache = self.forget.decode(tokens, state[1])
        return self.combine(logits, retain_logits, forget_logits), (retain_cache, forget_cache)

    def steer(self, base_logits: jax.Array, tokens: jax.Array) -> jax.Array:
        """Teacher-forced steered logits [B, T, V] for tokens [B, T], given the base model's full-forward
        logits on them (no cache: every position sees the same prefix in all three models)."""
        return self.combine(base_logits, self.retain(tokens), self.forget(tokens))


def steered_logits(base: nnx.Module, processor: DivergenceDecoding, tokens: jax.Array) -> jax.Array:
    """tokens [B, T] int -> the steered next-token logits [B, T, V] at every position (full forwards)."""
    return processor.steer(base(tokens), tokens)


def distillation_loss(student_logits: jax.Array, teacher_logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over the positions where mask [B, T] is nonzero of KL(p_teacher ‖ p_student), logits [B, T, V].

    Temperature 1 (the reference's T² factor is 1). Prompt positions carry mask 0 and contribute nothing, and
    a per-position constant added to either logit vector changes nothing (log-softmax first). −inf teacher
    logits (suppressed tokens) have probability 0 and contribute 0.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student_logits must have the teacher_logits' shape {tuple(teacher_logits.shape)}, got "
                         f"{tuple(student_logits.shape)}")
    if mask.shape != teacher_logits.shape[:-1]:
        raise ValueError(f"mask must have shape {tuple(teacher_logits.shape[:-1])} (the logits' [B, T]), got "
                         f"{tuple(mask.shape)}")
    student = jax.nn.log_softmax(student_logits.astype(jnp.float32), axis=-1)
    teacher = jax.nn.log_softmax(teacher_logits.astype(jnp.float32), axis=-1)
    teacher_probs = jnp.exp(teacher)
    # Written out rather than optax's KL: where the teacher gives probability 0 (a suppressed token) the term
    # must be 0, not 0 · (−inf) = NaN.
    per_token = jnp.sum(jnp.where(teacher_probs > 0, teacher_probs * (teacher - student), 0.0), axis=-1)
    weights = mask.astype(jnp.float32)
    return jnp.sum(per_token * weights) / jnp.maximum(jnp.sum(weights), 1.0)
