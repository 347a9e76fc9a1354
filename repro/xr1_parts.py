"""Training and scoring of the XR-1 reproduction: the small stage-1 model on the moving-sprite scenes.

Its own jitted optax loop (not the shared sequence trainer, which trains next-token language models on token
batches; this model takes frame pairs and action chunks and a random key per step, and is scored by held-out
reconstruction, codebook usage and cross-branch agreement rather than by a token loss).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.optim.hparams import with_standard_promotion
from icml26zoo.robotics import XR1, SpriteData, XR1Config, check_batch, make_sprite_data
from icml26zoo.vq import nearest_code, usage_statistics

__all__ = ["TrainConfig", "Trained", "evaluate", "make_splits", "train"]

LOSS_NAMES = ("total", "image_mse", "action_flow", "vq_vision", "vq_action", "kl")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """steps of AdamW (lr with linear warm-up then cosine decay to lr/100, betas 0.9/0.95) on batches of
    batch_size scenes."""

    steps: int
    batch_size: int
    lr: float = 1e-3
    warmup: int = 30


@dataclasses.dataclass(frozen=True)
class Trained:
    """A trained model's graph and state and its training-loss history {name: [steps]}."""

    graph: nnx.GraphDef
    state: nnx.State
    history: dict[str, np.ndarray]

    def model(self) -> XR1:
        return nnx.merge(self.graph, self.state)


def make_splits(seed: int, *, train_size: int, test_size: int) -> tuple[SpriteData, SpriteData]:
    """Disjoint train and test scenes of one seed (the test set's generator is seeded apart from the train's)."""
    return (make_sprite_data(2 * seed, train_size), make_sprite_data(2 * seed + 1, test_size))


def _arrays(data: SpriteData) -> tuple[jax.Array, ...]:
    return tuple(jnp.asarray(a) for a in (data.condition, data.target, data.actions, data.has_actions))


def _optimizer(options: TrainConfig) -> optax.GradientTransformation:
    # warm-up at most a fifth of the run, so the cosine part always has steps left
    schedule = optax.warmup_cosine_decay_schedule(0.0, options.lr, min(options.warmup, options.steps // 5),
                                                  options.steps, options.lr / 100)
    return with_standard_promotion(optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=1e-4))


# graph and options are static (hashable), the KL weight is traced: seeds and the kl/no_kl variants of one
# model size share one compiled step.
@functools.partial(jax.jit, static_argnums=(0, 1))
def _step(graph, options, params, rest, opt_state, batch, key, kl_weight):
    def loss_fn(p):
        losses = nnx.merge(graph, p, rest)(*batch, key, kl_weight).losses
        return losses["total"], losses
    (_, losses), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = _optimizer(options).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, losses


def train(config: XR1Config, data: SpriteData, options: TrainConfig, *, seed: int) -> Trained:
    """Trains XR1(config) on `data` with the stage-1 loss; returns the model and its loss history."""
    check_batch(config, data.condition, data.target, data.actions, data.has_actions)
    kl_weight = jnp.float32(config.kl_weight)
    # the weight travels as a traced argument; a model built with weight 0 has the same graph for every variant
    model = XR1(dataclasses.replace(config, kl_weight=0.0), rngs=nnx.Rngs(seed))
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = _optimizer(options)
    arrays = _arrays(data)
    rng = np.random.default_rng(seed)
    opt_state, key = optimizer.init(params), jax.random.key(seed)
    history = {name: [] for name in LOSS_NAMES}
    for _ in range(options.steps):
        index = jnp.asarray(rng.choice(len(data), options.batch_size, replace=False))
        key, sub = jax.random.split(key)
        params, opt_state, losses = _step(graph, options, params, rest, opt_state, tuple(a[index] for a in arrays),
                                          sub, kl_weight)
        for name in LOSS_NAMES:
            history[name].append(losses[name])
    history = {name: np.asarray(jnp.stack(values)) for name, values in history.items()}
    return Trained(graph, nnx.State.merge(params, rest), history)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _scores(graph, flow_steps, state, condition, target, actions, has, key):
    model = nnx.merge(graph, state)
    out = model(condition, target, actions, has, key)
    sampled = model.sample_actions(out.action_vq.quantized, key, flow_steps)
    cross = nearest_code(out.action_vq.quantized, model.vision_vq.codebook[...])
    return out, sampled, cross


def evaluate(trained: Trained, data: SpriteData, *, seed: int, flow_steps: int = 10) -> dict[str, float]:
    """Held-out scores of a trained model on `data`.

    image_mse / copy_mse: target-frame MSE of the reconstruction / of copying the condition frame; action_mse /
    mean_action_mse (robot samples): MSE of the flow head's sampled chunk (Euler, τ 1 -> 0) / of the test set's
    mean chunk; vision_codes / action_codes: codes used; agreement: fraction of robot-sample tokens whose action
    vector's nearest *vision* code is the vision branch's code; kl: the alignment KL.
    """
    model = trained.model()
    condition, target, actions, has = _arrays(data)

    out, sampled, cross = _scores(trained.graph, flow_steps, trained.state, condition, target, actions, has,
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
