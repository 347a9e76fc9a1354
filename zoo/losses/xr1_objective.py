"""Objective `xr1_stage1` of XR-1 (`robotics.xr1`, docs/papers/xr1.md): model `xr1` on batches of `zoo_sprites`.

The loss is the model's stage-1 total: vq_vision + vq_action + image_mse + action_flow + kl_weight · kl (the flow
term over the scenes with actions only; `XR1.__call__`). The objective's key draws the flow noise and times.
Metrics (summable, per scene; eval/X = X_sum / weight): loss_sum, weight (scenes), image_mse_sum, action_flow_sum,
kl_sum. Each term is the batch's mean times its scene count, so a padding row (evaluation past the end of the
split: all-zero frames) would enter the means: keep eval_examples a multiple of the batch size, as the preset does.
Train diagnostics: xr1/image_mse, xr1/action_flow, xr1/kl, xr1/vq_vision, xr1/vq_action.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.losses.batch_fields import require_batch_fields
from icml26zoo.registry import register_objective
from icml26zoo.robotics.xr1_registered import XR1Trainable

Batch = dict[str, jax.Array]
LOGGED = ("image_mse", "action_flow", "kl", "vq_vision", "vq_action")
SUMMED = ("image_mse", "action_flow", "kl")


def xr1_stage1(model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """XR-1's stage-1 loss on a `zoo_sprites` batch (module docstring)."""
    require_batch_fields("xr1_stage1", batch, ("points", "weights"), dataset="zoo_sprites")
    if not isinstance(model, XR1Trainable):
        raise ValueError(f"objective 'xr1_stage1' needs model.name='xr1', got {type(model).__name__}")
    losses = model(batch["points"], batch["weights"], rng).losses
    scenes = jnp.float32(batch["points"].shape[0])
    metrics = {"loss_sum": scenes * losses["total"], "weight": scenes}
    metrics |= {f"{name}_sum": scenes * losses[name] for name in SUMMED}
    metrics |= {f"xr1/{name}": losses[name] for name in LOGGED}
    return losses["total"], metrics


xr1_stage1.plotted_metrics = ("xr1/image_mse", "xr1/kl")
register_objective("xr1_stage1")(xr1_stage1)
