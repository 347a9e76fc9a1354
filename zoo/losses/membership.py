"""Language-membership classification ("membership"): member / non-member read at each row's `<cls>` token.

The formal-language rows (`train.data.formal_languages`: datasets "dyck", "palindromes", "bfvp") are the string,
P `<pad>` tokens and `<cls>`, so `<cls>` is the last real input token of a row (segment_ids > 0), and the model's
state there has seen the whole string and the padding, even for a causal model. The class is read from output
columns 0 ("non-member") and 1 ("member"), which these datasets keep out of their inputs: a two-way softmax over
those two logits, i.e. binary cross-entropy on their difference (the looped-transformer paper's classifier on
`<cls>`). Chance accuracy is 1/2 (the datasets' classes are exactly balanced).

Unlike objective "classification" (mean-pooled logits, any number of classes), nothing after `<cls>` and no
position before it enters the prediction, as in the looped, padded encoder of Jerad et al. (arXiv 2601.01754).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import LABELLED_FIELDS, require_batch_fields
from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.registry import register_objective

NUM_CLASSES = 2


def last_token_logits(logits: jax.Array, segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The logits [B, V] at each row's last real token (segment_ids [B, T] > 0), and row_weight [B].

    row_weight is 1 for rows holding a token and 0 for all-padding rows (whose logits are then row position 0's).
    """
    real = segment_ids > 0
    length = real.shape[1]
    # argmax finds the first True of the reversed mask, i.e. the last real position counted from the end.
    last = length - 1 - jnp.argmax(real[:, ::-1], axis=1)
    picked = jnp.take_along_axis(logits, last[:, None, None], axis=1)[:, 0]
    return picked, jnp.any(real, axis=1).astype(jnp.float32)


@register_objective("membership")
def membership_objective(
    model: nnx.Module, batch: dict[str, jax.Array], rng: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Two-way cross-entropy of the label batch["labels"] [B] (0 non-member, 1 member) at the `<cls>` position.

    Returns (mean loss, {"loss_sum", "weight" (labelled rows), "correct"}), summable over batches.
    """
    del rng  # Deterministic.
    require_batch_fields("membership", batch, LABELLED_FIELDS, dataset="dyck")
    logits = model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])
    at_cls, row_weight = last_token_logits(logits, batch["segment_ids"])
    sums = weighted_cross_entropy(at_cls[:, :NUM_CLASSES], batch["labels"], row_weight)
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct}
    return weighted_mean(sums), metrics
