"""`xr1`: XR-1's stage-1 model (`robotics.XR1`) as a registered model of the shared trainer.

It reads the feature batches of dataset `zoo_sprites` (`train.data.sprite_data`): the condition frame, the target
frame and the action chunk stacked along the points, which scenes have actions in the weights. Train it with
objective `xr1_stage1` (`losses.xr1_objective`); the preset is `xr1`:

    python -m icml26zoo.train --config xr1 --workdir /tmp/xr1

Model options (`model.model_options`) are `XR1Config`'s fields except `width` and `heads`, which are
`model.d_model` and `model.num_heads`.
"""

from __future__ import annotations

import jax
from flax import nnx

from icml26zoo.models.config import ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.robotics.xr1 import XR1, XR1Config, XR1Output
from icml26zoo.validation import check_float_array, check_shape

__all__ = ["XR1Trainable", "xr1_config"]


def xr1_config(cfg: ModelConfig) -> XR1Config:
    """The `XR1Config` of model config `cfg` (module docstring); ValueError naming model.model_options."""
    return parse_model_options(XR1Config, cfg, owner="xr1 model", fixed={"width": cfg.d_model, "heads": cfg.num_heads})


@register_model("xr1")
class XR1Trainable(nnx.Module):
    """XR-1 stage 1 on stacked frame-and-action feature batches (module docstring); `.xr1` is the model."""

    LANGUAGE_MODEL = False
    options_class = XR1Config

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.config = xr1_config(cfg)
        self.xr1 = XR1(self.config, rngs=rngs)

    def unpack(self, points: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """(condition [B, S, S, 3], target [B, S, S, 3], actions [B, T, 4], has_actions [B]) from points [B, N, 4]
        and weights [B, N], N >= 2S² + T; a scene has actions when its chunk's first row has a positive weight."""
        size, chunk, action_dim = self.config.image_size, self.config.chunk, self.config.action_dim
        pixels = size * size
        check_float_array("points", points, (None, None, None), "[B, N, W]")
        batch, num_points, width = points.shape
        if num_points < 2 * pixels + chunk or width < max(3, action_dim):
            raise ValueError(f"points must be [B, N >= {2 * pixels + chunk}, W >= {max(3, action_dim)}] (two "
                             f"{size}x{size} frames and a chunk of {chunk}), got {points.shape}")
        check_shape("weights", weights, (batch, num_points), "[B, N]")
        condition = points[:, :pixels, :3].reshape(batch, size, size, 3)
        target = points[:, pixels:2 * pixels, :3].reshape(batch, size, size, 3)
        actions = points[:, 2 * pixels:2 * pixels + chunk, :action_dim]
        return condition, target, actions, (weights[:, 2 * pixels] > 0).astype(points.dtype)

    def __call__(self, points: jax.Array, weights: jax.Array, key: jax.Array) -> XR1Output:
        """`XR1` on a feature batch (points [B, N, 4], weights [B, N]); key draws the flow noise and times."""
        return self.xr1(*self.unpack(points, weights), key)
