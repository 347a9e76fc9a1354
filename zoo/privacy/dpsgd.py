"""DP-SGD as optax transformations: per-example clipping, noise from any registered mechanism, then SGD.

    grads = per_example_grads(loss_fn, params, batch)        # every leaf [B, ...]
    tx = dp_sgd(0.1, clip_norm=1.0, noise="gaussian", noise_params={"scale": 1.1}, seed=0)
    updates, state = tx.update(grads, state, params)        # private mean gradient, then the SGD step

`private_aggregate` is the privatising part alone: each example's gradient (all leaves together) is clipped to
ℓ2 norm `clip_norm`, the clipped gradients are summed, `clip_norm` × noise of the named mechanism
(`mechanisms.noise_sampler`) is added to the flattened sum, and the result is divided by the batch size (a
post-processing). Its state carries the noise PRNG key. optax.contrib.differentially_private_aggregate does the
Gaussian case; this one takes any mechanism.

Training with the shared trainer: `optim.name="dp_sgd"` is registered with its own update
(`dp_update`), which vmaps the trainer's objective over the examples of the batch (each example as a batch of
one), so the trainer's step is not edited. Options (`optim.options`): clip_norm, noise, scale, p, a_ratio,
decay, radius, spacing, seed. The trainer's global clipping must be off (`optim.grad_clip_norm=0`: a global
clip of the stacked per-example gradients would be wrong) and so must accumulation. What the trainer logs
(loss, the mean *unclipped* gradient's norm) is not private. Accounting is not done by the trainer: see
`accounting` (and docs/papers/dp_mixture_mechanisms.md for how the reproduction counts participations).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from icml26zoo.optim._hparams import optimizer_options
from icml26zoo.privacy._checks import check_positive
from icml26zoo.privacy.mechanisms import noise_sampler
from icml26zoo.registry import register_optimizer

__all__ = ["DpSgdOptions", "clip_per_example", "dp_sgd", "dp_update", "per_example_grads", "private_aggregate"]


class PrivateAggregateState(NamedTuple):
    """key: uint32 raw PRNG key data of the noise stream (split once per step)."""

    key: jax.Array


def clip_per_example(grads: Any, clip_norm: float) -> tuple[Any, jax.Array]:
    """Each example's gradient (leaves [B, ...], all leaves together) scaled to ℓ2 norm ≤ clip_norm.

    Returns (clipped gradients, norms before clipping [B])."""
    leaves = jax.tree.leaves(grads)
    norms = jnp.sqrt(sum(jnp.sum(jnp.reshape(leaf, (leaf.shape[0], -1)) ** 2, axis=1) for leaf in leaves))
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-12))
    return jax.tree.map(lambda g: g * factor.reshape((-1,) + (1,) * (g.ndim - 1)).astype(g.dtype), grads), norms


def private_aggregate(clip_norm: float, noise: str = "gaussian", noise_params: Mapping[str, Any] | None = None,
                      seed: int = 0) -> optax.GradientTransformation:
    """Per-example gradients (leaves [B, ...]) -> (Σ clip(g_i) + clip_norm · noise) / B (leaves [...])."""
    clip_norm = check_positive(clip_norm, "clip_norm")
    sample = noise_sampler(noise, **dict(noise_params or {}))

    def init_fn(params: Any) -> PrivateAggregateState:
        del params
        return PrivateAggregateState(jax.random.key_data(jax.random.key(seed)))

    def update_fn(grads: Any, state: PrivateAggregateState, params: Any = None) -> tuple[Any, Any]:
        del params
        batch = jax.tree.leaves(grads)[0].shape[0]
        clipped, _ = clip_per_example(grads, clip_norm)
        flat, unravel = ravel_pytree(jax.tree.map(lambda g: jnp.sum(g, axis=0), clipped))
        key, next_key = jax.random.split(jax.random.wrap_key_data(state.key))
        noisy = flat + clip_norm * sample(key, flat.size).astype(flat.dtype)
        return unravel(noisy / batch), PrivateAggregateState(jax.random.key_data(next_key))

    return optax.GradientTransformation(init_fn, update_fn)


def dp_sgd(learning_rate: optax.ScalarOrSchedule, *, clip_norm: float, noise: str = "gaussian",
           noise_params: Mapping[str, Any] | None = None, seed: int = 0,
           momentum: float | None = None) -> optax.GradientTransformation:
    """`private_aggregate` followed by optax.sgd: takes per-example gradients, returns parameter updates."""
    return optax.chain(private_aggregate(clip_norm, noise, noise_params, seed), optax.sgd(learning_rate, momentum))


def per_example_grads(loss_fn: Callable[[Any, dict], jax.Array], params: Any, batch: Mapping[str, jax.Array]) -> Any:
    """∇ loss_fn(params, example) for every example, each passed as a batch of one: leaves [B, ...].

    `batch` maps names to arrays with the examples on axis 0 (the trainer's [B, T] / [B] batches)."""

    def one(example: Mapping[str, jax.Array]) -> Any:
        return jax.grad(loss_fn)(params, {name: value[None] for name, value in example.items()})

    return jax.vmap(one)(dict(batch))


def dp_update(loss_fn: Callable, params: Any, batch: Mapping[str, jax.Array], opt_state: Any,
              optimizer: optax.GradientTransformation) -> tuple[jax.Array, Any, Any, Any]:
    """The trainer's update for `optim.name="dp_sgd"`: (loss, mean unclipped gradient, updates, state)."""
    loss = loss_fn(params, batch)
    grads = per_example_grads(loss_fn, params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return loss, jax.tree.map(lambda g: jnp.mean(g, axis=0), grads), updates, opt_state


@dataclasses.dataclass(frozen=True)
class DpSgdOptions:
    """`optim.options` of dp_sgd: clip norm, noise mechanism and its parameters, noise seed, momentum."""

    clip_norm: float = 1.0
    noise: str = "gaussian"
    scale: float = 1.0
    p: float = 2.0
    a_ratio: float = 1.0
    decay: float = 1.0
    radius: int = 3
    spacing: float = 1.0
    seed: int = 0
    momentum: float = 0.0

    def noise_params(self) -> dict[str, Any]:
        by_mechanism = {"gaussian": ("scale",), "sgg": ("scale", "p", "a_ratio"),
                        "mog": ("scale", "decay", "radius", "spacing")}
        if self.noise not in by_mechanism:
            raise ValueError(f"dp_sgd option 'noise' must be one of {sorted(by_mechanism)}, got {self.noise!r}")
        return {name: getattr(self, name) for name in by_mechanism[self.noise]}


def _make_dp_update(cfg: Any) -> Callable:
    if cfg.grad_clip_norm > 0:
        raise ValueError(f"optim.grad_clip_norm must be 0 for optim.name='dp_sgd' (it clips per example with "
                         f"its clip_norm option; a global clip of the stacked per-example gradients is wrong), "
                         f"got {cfg.grad_clip_norm}")
    return dp_update


@register_optimizer("dp_sgd", update=_make_dp_update)
def _dp_sgd_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformation:
    """DP-SGD on per-example gradients (see the module docstring); weight decay is not applied."""
    options = optimizer_options(cfg, "dp_sgd", DpSgdOptions)
    return dp_sgd(learning_rate, clip_norm=options.clip_norm, noise=options.noise,
                  noise_params=options.noise_params(), seed=options.seed, momentum=options.momentum or None)
