"""The mixture-of-experts objectives: "lm_moe" (a decoder LM with MoE feed-forwards) and "multimodal_moe"
(ConfSMoE's multimodal classifier, model "confsmoe").

"lm_moe": next-token cross-entropy plus the MoE layers' auxiliary losses. The decoder LM's blocks return
their MoE auxiliary outputs (`Block.forward_with_aux`), stacked over layers by `run_layers(return_aux=True)`;
`forward_with_aux` runs the LM that way, so the aux losses reach the training loss without the trainer's
step knowing about them:

    loss = CE + Σ_layers (load_balance_weight · load_balance + z_loss_weight · router_z)
              + confidence_weight · MSE(confidence, P(o)[next token])        (ConfSMoE router only)

"multimodal_moe": the classifier's cross-entropy on batch["labels"] plus the same auxiliary losses of every
fusion layer, the confidence MSE regressing each routed token's confidence on P(o)[the sample's label] over
the tokens that reach the layer (`zoo.moe.multimodal`). The key is split into the stage-1 fills of the
batch's flagged missing modalities (the training split's: the mean of `pool_size` random inputs of the
batch's rows that have the modality, `zoo.moe.multimodal.fill_from_batch`) and the router's noise; both are
fresh every training step and fixed in evaluation (whose split is stored filled, so nothing is drawn there).
Options: `fill` (default True) runs stage 1 during training (False leaves a missing modality's raw input
at zero, as the dataset stores it: the "no imputation" arm of the ablation); `impute` (default True) runs
stage 2 of the imputation in the forward; `pool_size` (default 10, as the dataset's for its evaluation fills).

Both return the plain cross-entropy's summed metrics (loss_sum, weight, correct), so evaluations compare
with dense models, and, as train diagnostics (names with a "/", see `zoo.losses.objectives`), the routing
diagnostics of the batch (`zoo.moe.diagnostics`: expert load per layer, load and router entropy,
co-selection, collapse indicator, dropped share). The trainer logs their mean over each logging window and
draws collapse, co-selection and router entropy (`plotted_metrics`) on the end-of-run loss plot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import FEATURE_FIELDS, TOKEN_FIELDS, require_batch_fields
from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.losses.geometric import row_weights
from icml26zoo.models.block import run_layers
from icml26zoo.models.config import ModelConfig
from icml26zoo.models.lm import positions_from_segments
from icml26zoo.moe.confidence import confidence_loss
from icml26zoo.moe.diagnostics import diagnostics_scalars, routing_diagnostics
from icml26zoo.moe.layer import MoEConfig
from icml26zoo.moe.multimodal import fill_from_batch
from icml26zoo.moe.registry import router_options
from icml26zoo.registry import register_objective
from icml26zoo.validation import check_bool, check_int

Batch = dict[str, jax.Array]
# The routing diagnostics both objectives ask the trainer to draw on the loss plot.
PLOTTED_DIAGNOSTICS = ("moe/collapse", "moe/coselection", "moe/router_entropy")
# The aux entries the diagnostics read (`MoEFeedForward`'s aux).
DIAGNOSED = ("load", "cooccurrence", "router_entropy", "dropped")


def forward_with_aux(
    model: nnx.Module, tokens: jax.Array, *, segment_ids: jax.Array | None = None,
    positions: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A decoder LM's forward that also returns its blocks' aux: (logits [B, T, V] float32, {name: [L, ...]}).

    The logits equal `model(tokens, segment_ids=, positions=)`; aux is empty for a model without MoE.
    """
    if not hasattr(tokens, "dtype") or not jnp.issubdtype(tokens.dtype, jnp.integer) or tokens.ndim != 2:
        raise ValueError(f"tokens must be an integer array of shape [B, T], got "
                         f"{getattr(tokens, 'dtype', type(tokens))} with shape {getattr(tokens, 'shape', None)}")
    x = model.embed(tokens).astype(jnp.dtype(model.cfg.compute_dtype))
    if positions is None:
        positions = (jnp.broadcast_to(jnp.arange(x.shape[1], dtype=jnp.int32), x.shape[:2])
                     if segment_ids is None else positions_from_segments(segment_ids))
    x, _, aux = run_layers(model.layers, x, cfg=model.cfg, segment_ids=segment_ids, positions=positions,
                           return_aux=True)
    return model.logits_from_hidden(x), aux


def moe_aux_loss(cfg: ModelConfig, aux: dict[str, jax.Array], targets: jax.Array, weights: jax.Array) -> jax.Array:
    """The auxiliary part of the loss from stacked aux ([L, ...] leaves); 0 for a model without MoE.

    targets [B, T] int (the confidence router's true classes: the next tokens), weights [B, T] float.
    """
    if not aux:
        return jnp.zeros((), jnp.float32)
    total = jnp.sum(aux["loss"])
    if "confidence" in aux:
        options = router_options(cfg.moe.router, cfg.moe.router_options)
        layers = aux["confidence"].shape[0]
        mse = confidence_loss(
            aux["confidence"], aux["class_logits"], jnp.broadcast_to(targets, (layers, *targets.shape)),
            jnp.broadcast_to(weights, (layers, *weights.shape)), stop_gradient_target=options.stop_gradient_target,
        )
        total = total + options.confidence_weight * mse
    return total


def routing_metrics(aux: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """The train diagnostics of stacked aux ([L, ...] leaves): "moe/collapse", "moe/layer0/load/3", ...;
    none without MoE aux. No gradient flows through them."""
    if not aux:
        return {}
    return diagnostics_scalars(routing_diagnostics(jax.lax.stop_gradient({k: aux[k] for k in DIAGNOSED})))


@register_objective("lm_moe")
def lm_moe_objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Next-token cross-entropy (as objective "lm") plus the MoE auxiliary losses of every layer."""
    del rng  # Deterministic: the LM's routers run without noise.
    require_batch_fields("lm_moe", batch, TOKEN_FIELDS, dataset="pystdlib")
    logits, aux = forward_with_aux(
        model, batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"]
    )
    sums = weighted_cross_entropy(logits, batch["targets"], batch["weights"])
    extra = moe_aux_loss(model.cfg, aux, batch["targets"], batch["weights"])
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct, **routing_metrics(aux)}
    return weighted_mean(sums) + extra, metrics


lm_moe_objective.plotted_metrics = PLOTTED_DIAGNOSTICS


@dataclasses.dataclass(frozen=True)
class MultimodalMoEOptions:
    """Options of objective multimodal_moe (TrainConfig.objective_options)."""

    # Run stage 1 during training (a missing modality's input becomes the mean of `pool_size` batch rows
    # that have it); False keeps its zeros. Evaluate such a model with `zoo.moe.multimodal.zero_missing`.
    fill: bool = True
    # Run stage 2 of the imputation (expert-level, first layer) in the forward.
    impute: bool = True
    # Stage 1 during training: inputs averaged into a missing modality's fill.
    pool_size: int = 10

    def __post_init__(self) -> None:
        check_bool("multimodal_moe option 'fill'", self.fill)
        check_bool("multimodal_moe option 'impute'", self.impute)
        check_int("multimodal_moe option 'pool_size'", self.pool_size)


_MULTIMODAL_DEFAULTS = MultimodalMoEOptions()


def classifier_aux_loss(moe_cfg: MoEConfig, auxes: list[dict[str, Any]], labels: jax.Array, rows: jax.Array
                        ) -> jax.Array:
    """The auxiliary loss of a ConfSMoE forward (one aux dict per fusion layer): Σ_layers aux["loss"] plus
    confidence_weight · Σ_layers MSE(c, P(o)[y]) for the confidence router (the sample's label y [B] on each of
    its tokens, weighted by the tokens that reach the layer and by the row weights `rows` [B])."""
    aux_loss = sum(aux["loss"] for aux in auxes)
    confidence_mse = jnp.zeros((), jnp.float32)
    if "confidence" in auxes[0]:
        options = router_options(moe_cfg.router, moe_cfg.router_options)
        per_row = auxes[0]["token_weight"].shape[0] // labels.shape[0]
        token_labels, token_rows = jnp.repeat(labels, per_row), jnp.repeat(rows, per_row)
        confidence_mse = options.confidence_weight * sum(
            confidence_loss(aux["confidence"], aux["class_logits"], token_labels, aux["token_weight"] * token_rows,
                            stop_gradient_target=options.stop_gradient_target) for aux in auxes)
    return aux_loss + confidence_mse


def multimodal_moe(model: nnx.Module, batch: Batch, rng: jax.Array,
                   options: MultimodalMoEOptions = _MULTIMODAL_DEFAULTS) -> tuple[jax.Array, dict[str, jax.Array]]:
    """ConfSMoE's classification loss on a feature batch of `zoo_multimodal` (module docstring)."""
    require_batch_fields("multimodal_moe", batch, (*FEATURE_FIELDS, "labels"), dataset="zoo_multimodal")
    if not hasattr(model, "unpack"):
        raise ValueError(f"objective 'multimodal_moe' needs model.name='confsmoe' (a model with `unpack`), got "
                         f"{type(model).__name__}")
    fill_key, noise_key = jax.random.split(rng)
    inputs, present, to_fill = model.unpack(batch["points"], batch["features"], batch["weights"])
    if options.fill:
        inputs = fill_from_batch(inputs, present, to_fill, fill_key, options.pool_size)
    logits, auxes = model.classifier(inputs, present, impute=options.impute, rng=noise_key)
    rows = row_weights(batch["weights"])
    sums = weighted_cross_entropy(logits.astype(jnp.float32), batch["labels"], rows)
    extra = classifier_aux_loss(model.classifier.config.moe, auxes, batch["labels"], rows)
    stacked = {name: jnp.stack([aux[name] for aux in auxes]) for name in DIAGNOSED}
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct,
               **routing_metrics(stacked)}
    return weighted_mean(sums) + extra, metrics


multimodal_moe.options_class = MultimodalMoEOptions
multimodal_moe.plotted_metrics = PLOTTED_DIAGNOSTICS
register_objective("multimodal_moe")(multimodal_moe)
