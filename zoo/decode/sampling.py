"""Next-token sampling over logits [B, V]: greedy, temperature, top-k and top-p (nucleus), batched.

The filters act in this order, as in common decoding libraries: divide by the temperature, keep the top-k
logits, then keep the nucleus (top-p) of the tempered, top-k-renormalized distribution; the token is drawn
from the softmax of what remains. `sampling_logits` returns that filtered, tempered logit vector, whose
softmax is exactly the sampling distribution (tests compare it with closed forms); `sample_logits` draws from
it. Temperature 0 is greedy decoding (argmax, the filters are irrelevant).

Ties: top-k keeps every token tied with the k-th largest logit, and top-p keeps every token tied with the
least likely token of the nucleus, so both sets are closed under ties (a permutation of the vocabulary
permutes the result) and can hold more than k tokens, or more than the smallest set with mass >= p.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.validation import check_float_array, check_int, check_interval, check_non_negative

__all__ = ["check_sampling", "sample_logits", "sampling_logits", "top_k_mask", "top_p_mask"]


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, vocab_size: int) -> None:
    """ValueError naming the argument unless temperature >= 0 is finite (0 = greedy), top_k is None or an int
    in [1, vocab_size] and top_p is None or a number in (0, 1]."""
    check_non_negative("temperature (0 = greedy)", temperature, finite=True)
    if top_k is not None:
        check_int("top_k", top_k, maximum=vocab_size)
    if top_p is not None:
        check_interval("top_p", top_p, 0, 1, closed="right")


def top_k_mask(logits: jax.Array, k: int) -> jax.Array:
    """logits [B, V] -> [B, V] with every logit below the k-th largest of its row set to -inf (ties kept)."""
    kth_largest = jax.lax.top_k(logits, k)[0][:, -1:]  # [B, 1]
    return jnp.where(logits < kth_largest, -jnp.inf, logits)


def top_p_mask(logits: jax.Array, p: float) -> jax.Array:
    """logits [B, V] -> [B, V] keeping the nucleus: the most likely tokens whose softmax mass first reaches p.

    Sorted by probability, a token is kept when the mass of the tokens strictly more likely than it (in the
    sorted order) is below p; then every token tied with the least likely kept one is kept too. p = 1 keeps
    everything (no rounding of the cumulative sum can drop a tail token).
    """
    if p >= 1:
        return logits
    probs = jax.nn.softmax(logits, axis=-1)
    sorted_probs = -jnp.sort(-probs, axis=-1)  # [B, V] descending
    mass_before = jnp.concatenate(
        [jnp.zeros_like(sorted_probs[:, :1]), jnp.cumsum(sorted_probs, axis=-1)[:, :-1]], axis=-1
    )
    kept_sorted = mass_before < p  # a prefix of the sorted order, never empty (mass_before[0] = 0)
    # The least likely kept probability; ties with it stay, so the kept set does not depend on sort order.
    threshold = jnp.min(jnp.where(kept_sorted, sorted_probs, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(probs < threshold, -jnp.inf, logits)


def sampling_logits(
    logits: jax.Array, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> jax.Array:
    """logits [B, V] -> the filtered logits [B, V] (float32) whose softmax is the sampling distribution.

    Divides by temperature (> 0 here), masks outside the top-k, then outside the top-p nucleus, with -inf.
    """
    check_float_array("logits", logits, (None, None), "[B, V]")
    check_sampling(temperature, top_k, top_p, logits.shape[-1])
    if temperature == 0:
        raise ValueError("temperature must be > 0 for a sampling distribution; 0 means greedy (use sample_logits)")
    scaled = logits.astype(jnp.float32) / temperature
    if top_k is not None:
        scaled = top_k_mask(scaled, top_k)
    if top_p is not None:
        scaled = top_p_mask(scaled, top_p)
    return scaled


def sample_logits(
    logits: jax.Array,
    key: jax.Array,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> jax.Array:
    """logits [B, V] -> tokens [B] int32: argmax at temperature 0, else a draw from `sampling_logits`."""
    check_float_array("logits", logits, (None, None), "[B, V]")
    check_sampling(temperature, top_k, top_p, logits.shape[-1])
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    filtered = sampling_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return jax.random.categorical(key, filtered, axis=-1).astype(jnp.int32)
