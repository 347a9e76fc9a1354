"""Training objectives: what the trainer minimizes, chosen by name in the run config (`objective="lm"`).

An objective is a pure function `objective(model, batch, rng) -> (loss, metrics)`:

  model    a zoo model called as `model(inputs, segment_ids=..., positions=...) -> logits [B, T, V]`
  batch    the trainer's batch (`train.data.pipeline`): inputs, targets, segment_ids, positions [B, T]
           int32 and weights [B, T] float32, plus labels [B] int32 from labelled datasets
  rng      a PRNG key for stochastic objectives (fresh every training step, fixed during evaluation)
  loss     float32 scalar, the quantity the trainer differentiates
  metrics  float32 scalars of two kinds, told apart by their names:
           - summable statistics (no "/" in the name) that add up over batches: "loss_sum", "weight" and
             "correct", from which evaluation reports eval/loss = loss_sum / weight and eval/accuracy =
             correct / weight, and any "X_sum" (reported as eval/X = X_sum / X_weight, or / weight);
           - train diagnostics (a "/" in the name, a namespace such as "moe/collapse"): one batch's scalars
             the trainer logs under that name at every train record, averaged over the steps since the
             previous one; evaluation ignores them. Names may not start with "train/", "eval/", "perf/" or
             "spike/" (the trainer's own).
An objective that wants some of its diagnostics drawn on the end-of-run loss plot lists them in its
attribute `plotted_metrics` (a tuple of names), e.g. `lm_moe_objective.plotted_metrics = ("moe/collapse",)`.
The contract is enforced by `train.step` (`split_metrics`).

An objective first checks the fields it reads (`losses.batch_fields.require_batch_fields`), so a batch of
the wrong kind is a ValueError naming them. A new objective registers itself with `@register_objective("name")`
in a module imported by `zoo.losses`; the train step, the loop and evaluation only look it up by name.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import LABELLED_FIELDS, TOKEN_FIELDS, require_batch_fields
from icml26zoo.losses.cross_entropy import CrossEntropySums, weighted_cross_entropy, weighted_mean
from icml26zoo.registry import register_objective

Batch = dict[str, jax.Array]
Objective = Callable[[nnx.Module, Batch, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]


def _logits(model: nnx.Module, batch: Batch) -> jax.Array:
    """The model's logits [B, T, V] float32 on the batch's packed rows."""
    return model(batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"])


def _result(sums: CrossEntropySums) -> tuple[jax.Array, dict[str, jax.Array]]:
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct}
    return weighted_mean(sums), metrics


@register_objective("lm")
def lm_objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Next-token cross-entropy, weighted per target by batch["weights"] [B, T] (0 on padding).

    loss = Σ w · CE(logits, targets) / max(Σ w, 1); weight counts predicted tokens.
    """
    del rng  # Deterministic.
    require_batch_fields("lm", batch, TOKEN_FIELDS, dataset="pystdlib")
    return _result(weighted_cross_entropy(_logits(model, batch), batch["targets"], batch["weights"]))


def pooled_logits(logits: jax.Array, segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean of logits [B, T, V] over each row's real tokens (segment_ids [B, T] > 0).

    Returns (pooled [B, V] float32, row_weight [B] float32: 1 for rows holding a token, 0 for padding rows).
    The head is linear, so this is the head applied to the mean of the final (normalized) hidden states:
    mean-pooling followed by a linear classifier, with the model's own output head as the classifier.
    """
    mask = (segment_ids > 0).astype(jnp.float32)
    count = jnp.sum(mask, axis=1)
    # An elementwise sum rather than an einsum: exact float32 whatever the backend's matmul precision.
    summed = jnp.sum(logits.astype(jnp.float32) * mask[:, :, None], axis=1)
    pooled = summed / jnp.maximum(count, 1.0)[:, None]
    return pooled, (count > 0).astype(jnp.float32)


@register_objective("classification")
def classification_objective(
    model: nnx.Module, batch: Batch, rng: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Sequence classification: one label per row, batch["labels"] [B] int32 in [0, C).

    Any registered model is the classifier: its logits are mean-pooled over the row's real tokens and
    label c is read from output column c (datasets keep token ids 0 .. C-1 out of their inputs, so those
    columns serve only as the class head). weight counts labelled rows; chance accuracy is 1 / C.
    """
    del rng  # Deterministic.
    require_batch_fields("classification", batch, LABELLED_FIELDS, dataset="topics")
    pooled, row_weight = pooled_logits(_logits(model, batch), batch["segment_ids"])
    return _result(weighted_cross_entropy(pooled, batch["labels"], row_weight))


# Read by the train CLI's pre-flight checks: a dataset whose rows carry no labels is refused before training.
classification_objective.needs_labels = True
