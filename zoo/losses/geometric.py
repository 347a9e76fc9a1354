"""Objectives of the geometric models (issue 20): classification of point sets and per-point regression.

Both call `model(batch["points"], batch["features"], batch["weights"])` (plus `key=rng` for a model declaring
`TAKES_KEY = True`; the interface of
`icml26zoo.geometric`; batch format in `train.data.features`). A padding row (all weights 0) has weight 0
in every sum, so evaluation can pad its last batch.

  set_classification  cross-entropy of the pooled logits [B, C] against batch["labels"] [B];
                      loss_sum, weight (real rows) and correct (argmax == label) as the classification objective.
  point_regression    quadrature-weighted relative L2 error per example, ‖û − u‖_w / ‖u‖_w with
                      ‖f‖²_w = Σ_i w_i ‖f_i‖² over the example's points (w = batch["weights"]), averaged over
                      real rows. Metrics: loss_sum (Σ rows of the relative error), weight (real rows), correct
                      (rows whose relative error is below the option `tolerance`, so eval/accuracy is the
                      fraction of examples predicted within it) and mse_sum (Σ rows of the weighted mean
                      squared error Σ_i w_i ‖û_i − u_i‖² / Σ_i w_i, reported as eval/mse).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import FEATURE_FIELDS, require_batch_fields
from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_positive

Batch = dict[str, jax.Array]
# Added under square roots: keeps the gradient of ‖û − u‖_w finite when the error is exactly 0.
_SQRT_EPS = 1e-30


def _outputs(model: nnx.Module, batch: Batch, rng: jax.Array) -> jax.Array:
    """The model's outputs; a model declaring `TAKES_KEY = True` (a randomized layer, e.g. PACE's sketch) also
    gets the objective's key, so training draws fresh randomness every step and evaluation a fixed one."""
    inputs = (batch["points"], batch["features"], batch["weights"])
    if getattr(model, "TAKES_KEY", False):
        return model(*inputs, key=rng).astype(jnp.float32)
    return model(*inputs).astype(jnp.float32)


def row_weights(weights: jax.Array) -> jax.Array:
    """weights [B, N] -> [B] float32: 1 for rows holding a real point, 0 for padding rows."""
    return jnp.any(weights > 0, axis=1).astype(jnp.float32)


@register_objective("set_classification")
def set_classification(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Cross-entropy of the model's pooled logits [B, C] (readout "pool") against batch["labels"] [B] int32."""
    require_batch_fields("set_classification", batch, (*FEATURE_FIELDS, "labels"), dataset="zoo_shapes")
    logits = _outputs(model, batch, rng)
    if logits.ndim != 2 or logits.shape[0] != batch["labels"].shape[0]:
        raise ValueError(f"objective 'set_classification' needs pooled logits [B, C] = [{batch['labels'].shape[0]}, C] "
                         f"(model.model_options readout='pool'), got shape {list(logits.shape)}")
    sums = weighted_cross_entropy(logits, batch["labels"], row_weights(batch["weights"]))
    return weighted_mean(sums), {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct}


@dataclasses.dataclass(frozen=True)
class PointRegressionOptions:
    """Options of objective point_regression (TrainConfig.objective_options)."""

    # An example counts as correct (eval/accuracy) when its relative L2 error is below this.
    tolerance: float = 0.1

    def __post_init__(self) -> None:
        check_positive("point_regression option 'tolerance'", self.tolerance)


_DEFAULTS = PointRegressionOptions()


def relative_l2(predictions: jax.Array, targets: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per example (relative error ‖û − u‖_w / ‖u‖_w [B], weighted MSE Σ w‖û − u‖² / Σ w [B]).

    predictions, targets [B, N, O]; weights [B, N]. Padding rows give 0 for both.
    """
    weights = weights.astype(jnp.float32)
    error_sq = jnp.sum(weights * jnp.sum(jnp.square(predictions - targets), axis=-1), axis=1)
    target_sq = jnp.sum(weights * jnp.sum(jnp.square(targets), axis=-1), axis=1)
    relative = jnp.sqrt(error_sq + _SQRT_EPS) / jnp.sqrt(jnp.maximum(target_sq, _SQRT_EPS))
    total = jnp.sum(weights, axis=1)
    real = total > 0
    mse = jnp.where(real, error_sq / jnp.where(real, total, 1.0), 0.0)
    return jnp.where(real, relative, 0.0), mse


def point_regression(model: nnx.Module, batch: Batch, rng: jax.Array, options: PointRegressionOptions = _DEFAULTS
                     ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Mean over real rows of the relative L2 error of per-point outputs [B, N, O] against batch["targets"]."""
    require_batch_fields("point_regression", batch, (*FEATURE_FIELDS, "targets"), dataset="zoo_sphere")
    predictions, targets = _outputs(model, batch, rng), batch["targets"].astype(jnp.float32)
    if predictions.shape != targets.shape:
        raise ValueError(f"objective 'point_regression' needs per-point outputs shaped like batch['targets'] "
                         f"{list(targets.shape)} (model.model_options readout='point', num_outputs="
                         f"{targets.shape[-1]}), got shape {list(predictions.shape)}")
    relative, mse = relative_l2(predictions, targets, batch["weights"])
    rows = row_weights(batch["weights"])
    loss_sum, weight = jnp.sum(relative * rows), jnp.sum(rows)
    correct = jnp.sum(rows * (relative < options.tolerance).astype(jnp.float32))
    metrics = {"loss_sum": loss_sum, "weight": weight, "correct": correct, "mse_sum": jnp.sum(mse * rows)}
    return loss_sum / jnp.maximum(weight, 1.0), metrics


point_regression.options_class = PointRegressionOptions
register_objective("point_regression")(point_regression)
