"""Objective `api` of API (`multimodal.api`, docs/papers/api.md): model `api` on batches of dataset `zoo_msa`.

Training (`train=True`, the shared trainer's train step): each row keeps k ~ Uniform{1, 2, 3} of the modalities the
batch marks available, a uniformly random subset (the reference draws the number of modalities per batch; option
`random_availability=False` keeps the batch's own), the model fills the others using the true class c(y), and

    loss = Σ_rows |ŷ − y| / rows + proto_weight · L_proto + recon_weight · L_recon      (`api.api_loss`)

Then the batch's projected sequences and classes enter the model's epoch cache (`APIModel.remember`), which
replaces the prototypes by SCOPE's update when it completes an epoch (the model needs `cache_size` > 0 for any
fill but "zero").
Evaluation (`train=False`): the batch's availability as it is; the class is estimated from the available
modalities only (labels are not used).

Metrics (summable; eval/X = X_sum / X_weight): loss_sum, weight (rows), mae_sum (|clip(ŷ, ±3) − y|), correct (acc-7
of the clipped prediction: eval/accuracy), acc2_sum (sign, y >= 0 positive), imp_err_sum / imp_err_weight (Σ|fill −
x|² / Σ|x|² over the missing modalities in the model's projected space; 1 for the zero fill) and, for the prototype
fills, class_acc_sum / class_acc_weight (the imputation class against the true one, over rows missing a modality).
Train diagnostics: api/proto, api/recon (the two auxiliary losses) and api/ready (the fraction of the 3 × 7
prototypes that are ready).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import require_batch_fields
from icml26zoo.multimodal import api, api_scope
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_bool

Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class APIObjectiveOptions:
    """Options of objective api (TrainConfig.objective_options)."""

    # Redraw each row's available modalities in training (1-3 of those present); False trains on the batch's own.
    random_availability: bool = True

    def __post_init__(self) -> None:
        check_bool("api option 'random_availability'", self.random_availability)


_DEFAULTS = APIObjectiveOptions()


def random_availability(key: jax.Array, available: jax.Array) -> jax.Array:
    """available [B, 3] bool -> [B, 3] bool: each row keeps min(k, present) of its available modalities, k uniform
    on {1, 2, 3}, a uniformly random subset of them (rows with none stay with none)."""
    count_key, order_key = jax.random.split(key)
    count = jax.random.randint(count_key, available.shape[:1], 1, 4)
    scores = jnp.where(available, jax.random.uniform(order_key, available.shape), -1.0)
    rank = jnp.argsort(jnp.argsort(-scores, axis=1), axis=1)
    return available & (rank < count[:, None])


def imputation_sums(output: api.APIOutput, available: jax.Array, rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(Σ|fill − x|², Σ|x|²) over the missing modalities of the real rows (rows [B] 0/1), in projected space."""
    error, energy = jnp.float32(0.0), jnp.float32(0.0)
    for m, (filled, real) in enumerate(zip(output.filled, output.projected, strict=True)):
        missing = (~available[:, m]).astype(jnp.float32) * rows
        error += jnp.sum(missing * jnp.sum(jnp.square(filled - real), axis=(1, 2)))
        energy += jnp.sum(missing * jnp.sum(jnp.square(real), axis=(1, 2)))
    return error, energy


def score_sums(output: api.APIOutput, labels: jax.Array, available: jax.Array, rows: jax.Array,
               fill: str) -> dict[str, jax.Array]:
    """The summable scores of the module docstring for one batch (rows [B] 0/1 marks the real rows)."""
    clipped = jnp.clip(output.prediction, -3.0, 3.0)
    true_class = api_scope.label_to_class(labels)
    sums = {"loss_sum": jnp.sum(rows * jnp.abs(output.prediction - labels)), "weight": jnp.sum(rows),
            "mae_sum": jnp.sum(rows * jnp.abs(clipped - labels)),
            "correct": jnp.sum(rows * (api_scope.label_to_class(clipped) == true_class).astype(jnp.float32)),
            "acc2_sum": jnp.sum(rows * ((clipped >= 0) == (labels >= 0)).astype(jnp.float32))}
    sums["imp_err_sum"], sums["imp_err_weight"] = imputation_sums(output, available, rows)
    if fill != "zero":  # the zero fill estimates no class
        incomplete = rows * (~jnp.all(available, axis=1)).astype(jnp.float32)
        sums["class_acc_sum"] = jnp.sum(incomplete * (output.classes == true_class).astype(jnp.float32))
        sums["class_acc_weight"] = jnp.sum(incomplete)
    return {name: value.astype(jnp.float32) for name, value in sums.items()}


def api_objective(model: nnx.Module, batch: Batch, rng: jax.Array, options: APIObjectiveOptions = _DEFAULTS, *,
                  train: bool = True) -> tuple[jax.Array, dict[str, jax.Array]]:
    """API's loss and scores on a `zoo_msa` batch (module docstring)."""
    require_batch_fields("api", batch, ("points", "weights", "targets"), dataset="zoo_msa")
    if not hasattr(model, "api") or not isinstance(model.api, api.APIModel):
        raise ValueError(f"objective 'api' needs model.name='api', got {type(model).__name__}")
    config = model.config
    labels = batch["targets"][:, 0, 0]
    rows = (jnp.sum(batch["weights"], axis=1) > 0).astype(jnp.float32)
    available = model.unpack(batch["points"], batch["weights"])[1]
    mask_key, dropout_key = jax.random.split(rng)
    if train and options.random_availability:
        available = random_availability(mask_key, available)
    output = model(batch["points"], batch["weights"], available, labels if train else None, train=train,
                   rngs=nnx.Rngs(dropout=dropout_key))
    loss, parts = api.api_loss(output, labels, config, rows)
    if train and config.fill != "zero":
        model.api.remember(output.projected, output.classes)
    metrics = score_sums(output, labels, available, rows, config.fill)
    metrics.update({"api/proto": parts["proto"], "api/recon": parts["recon"],
                    "api/ready": jnp.mean(model.api.ready.get_value().astype(jnp.float32))})
    return loss, metrics


api_objective.options_class = APIObjectiveOptions
api_objective.trainer_arguments = ("train",)
api_objective.plotted_metrics = ("api/proto",)
register_objective("api")(api_objective)
