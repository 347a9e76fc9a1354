"""The "lm_moe" objective: next-token cross-entropy plus the MoE layers' auxiliary losses.

The decoder LM's blocks return their MoE auxiliary outputs (`Block.forward_with_aux`), stacked over layers
by `run_layers(return_aux=True)`; `forward_with_aux` runs the LM that way, so the aux losses reach the
training loss without the trainer's step knowing about them:

    loss = CE + Σ_layers (load_balance_weight · load_balance + z_loss_weight · router_z)
              + confidence_weight · MSE(confidence, P(o)[next token])        (ConfSMoE router only)

The summed metrics (loss_sum, weight, correct) are the plain cross-entropy's, so evaluations compare with
dense models. The routing diagnostics (`zoo.moe.diagnostics`: expert load per layer, load and router
entropy, co-selection, collapse indicator, dropped share) of every training step reach the run's
metrics.jsonl through `train.metrics.report_train_metrics` (their mean over the steps between two train
records), and collapse, co-selection and router entropy are drawn on the end-of-run loss plot.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.models.block import run_layers
from icml26zoo.models.config import ModelConfig
from icml26zoo.models.lm import _check_tokens, positions_from_segments
from icml26zoo.moe.confidence import confidence_loss
from icml26zoo.moe.diagnostics import diagnostics_scalars, routing_diagnostics
from icml26zoo.moe.registry import router_options
from icml26zoo.registry import register_objective

Batch = dict[str, jax.Array]


def forward_with_aux(
    model: nnx.Module, tokens: jax.Array, *, segment_ids: jax.Array | None = None,
    positions: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A decoder LM's forward that also returns its blocks' aux: (logits [B, T, V] float32, {name: [L, ...]}).

    The logits equal `model(tokens, segment_ids=, positions=)`; aux is empty for a model without MoE.
    """
    _check_tokens(tokens)
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
        options = router_options(cfg.moe_router, cfg.moe_router_options)
        layers = aux["confidence"].shape[0]
        mse = confidence_loss(
            aux["confidence"], aux["class_logits"], jnp.broadcast_to(targets, (layers, *targets.shape)),
            jnp.broadcast_to(weights, (layers, *weights.shape)), stop_gradient_target=options.stop_gradient_target,
        )
        total = total + options.confidence_weight * mse
    return total


@register_objective("lm_moe")
def lm_moe_objective(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Next-token cross-entropy (as objective "lm") plus the MoE auxiliary losses of every layer."""
    del rng  # Deterministic: the LM's routers run without noise.
    logits, aux = forward_with_aux(
        model, batch["inputs"], segment_ids=batch["segment_ids"], positions=batch["positions"]
    )
    sums = weighted_cross_entropy(logits, batch["targets"], batch["weights"])
    extra = moe_aux_loss(model.cfg, aux, batch["targets"], batch["weights"])
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct}
    return with_routing_report(weighted_mean(sums) + extra, aux), metrics


PLOTTED_DIAGNOSTICS = ("moe/collapse", "moe/coselection", "moe/router_entropy")


def with_routing_report(loss: jax.Array, aux: dict[str, jax.Array]) -> jax.Array:
    """`loss` unchanged; when the trainer differentiates it, the routing diagnostics of `aux` go to the
    run's metrics (`train.metrics.report_train_metrics`). Without MoE aux, or without the train extra
    installed (a core install only calls the objective directly), `loss` is returned as is."""
    if not aux:
        return loss
    try:
        from icml26zoo.train.metrics import report_train_metrics
    except ImportError:
        return loss
    scalars = diagnostics_scalars(routing_diagnostics(jax.lax.stop_gradient(aux)))
    return report_train_metrics(loss, scalars, plot=PLOTTED_DIAGNOSTICS)
