"""Scoring of the XR-1 reproduction: held-out scenes for a trained stage-1 model and its scores.

The model is trained by the shared trainer (preset `xr1`: model `xr1`, objective `xr1_stage1`, dataset
`zoo_sprites`); this module scores the trained `XR1` on scenes the training split never drew.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.robotics import XR1, SpriteData, make_sprite_data
from icml26zoo.vq import nearest_code, usage_statistics

__all__ = ["evaluate", "test_scenes"]


def test_scenes(seed: int, size: int, *, image_size: int = 32, chunk: int = 16) -> SpriteData:
    """`size` held-out scenes of seed `seed` (numpy generator 2·seed + 1; the training split is the dataset's)."""
    return make_sprite_data(2 * seed + 1, size, image_size=image_size, chunk=chunk)


def _arrays(data: SpriteData) -> tuple[jax.Array, ...]:
    return tuple(jnp.asarray(a) for a in (data.condition, data.target, data.actions, data.has_actions))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _scores(graph, flow_steps, state, condition, target, actions, has, key):
    model = nnx.merge(graph, state)
    out = model(condition, target, actions, has, key)
    sampled = model.sample_actions(out.action_vq.quantized, key, flow_steps)
    cross = nearest_code(out.action_vq.quantized, model.vision_vq.codebook[...])
    return out, sampled, cross


def evaluate(model: XR1, data: SpriteData, *, seed: int, flow_steps: int = 10) -> dict[str, float]:
    """Held-out scores of a trained model on `data`.

    image_mse / copy_mse: target-frame MSE of the reconstruction / of copying the condition frame; action_mse /
    mean_action_mse (robot samples): MSE of the flow head's sampled chunk (Euler, τ 1 -> 0) / of the test set's
    mean chunk; vision_codes / action_codes: codes used; agreement: fraction of robot-sample tokens whose action
    vector's nearest *vision* code is the vision branch's code; kl: the alignment KL.
    """
    condition, target, actions, has = _arrays(data)
    graph, state = nnx.split(model)
    out, sampled, cross = _scores(graph, flow_steps, state, condition, target, actions, has,
                                  jax.random.key(10_000 + seed))
    robot = np.asarray(data.has_actions) > 0
    k = model.config.codebook_size
    vision_usage = usage_statistics(out.vision_vq.indices, k)
    action_usage = usage_statistics(out.action_vq.indices, k, jnp.broadcast_to(has[:, None], cross.shape))
    true = np.asarray(actions)[robot]
    return {
        "image_mse": float(jnp.mean((out.reconstruction - target) ** 2)),
        "copy_mse": float(jnp.mean((condition - target) ** 2)),
        "action_mse": float(np.mean((np.asarray(sampled)[robot] - true) ** 2)),
        "mean_action_mse": float(np.mean((true - true.mean(axis=0)) ** 2)),
        "vision_codes": int(vision_usage["used_codes"]),
        "action_codes": int(action_usage["used_codes"]),
        "agreement": float(np.mean(np.asarray(cross)[robot] == np.asarray(out.vision_vq.indices)[robot])),
        "kl": float(out.losses["kl"]),
    }
