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
one) and privatises them, so the trainer's step is not edited; the registered transformation itself is the
noise-key stage plus SGD on the private mean (alone, i.e. without the update, it is plain SGD).
Options (`optim.options`): clip_norm, noise, scale, p, a_ratio,
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

from icml26zoo.optim.hparams import optimizer_options
from icml26zoo.privacy.mechanisms import noise_sampler
from icml26zoo.registry import register_optimizer
from icml26zoo.validation import check_int, check_positive, check_unit_interval

__all__ = ["DpSgdOptions", "clip_per_example", "dp_sgd", "dp_update", "noise_key_state", "per_example_grads",
           "private_aggregate", "privatize"]


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


def privatize(grads: Any, key: jax.Array, clip_norm: float, sample: Callable[[jax.Array, int], jax.Array]) -> Any:
    """(Σ_i clip(g_i) + clip_norm · sample(key, dim)) / B for per-example gradients (leaves [B, ...])."""
    batch = jax.tree.leaves(grads)[0].shape[0]
    clipped, _ = clip_per_example(grads, clip_norm)
    flat, unravel = ravel_pytree(jax.tree.map(lambda g: jnp.sum(g, axis=0), clipped))
    noisy = flat + clip_norm * sample(key, flat.size).astype(flat.dtype)
    return unravel(noisy / batch)


def noise_key_state(seed: int = 0) -> optax.GradientTransformation:
    """Identity on the updates; its state is the noise PRNG key, split once per step (the trainer's DP update
    reads the key from it: the trainer passes no key to an optimizer)."""

    def init_fn(params: Any) -> PrivateAggregateState:
        del params
        return PrivateAggregateState(jax.random.key_data(jax.random.key(seed)))

    def update_fn(updates: Any, state: PrivateAggregateState, params: Any = None) -> tuple[Any, Any]:
        del params
        next_key = jax.random.split(jax.random.wrap_key_data(state.key))[1]
        return updates, PrivateAggregateState(jax.random.key_data(next_key))

    return optax.GradientTransformation(init_fn, update_fn)


def step_noise_key(state: PrivateAggregateState) -> jax.Array:
    """The key this step's noise is drawn with (the state's key is then advanced to the other half)."""
    return jax.random.split(jax.random.wrap_key_data(state.key))[0]


def private_aggregate(clip_norm: float, noise: str = "gaussian", noise_params: Mapping[str, Any] | None = None,
                      seed: int = 0) -> optax.GradientTransformation:
    """Per-example gradients (leaves [B, ...]) -> (Σ clip(g_i) + clip_norm · noise) / B (leaves [...])."""
    clip_norm = check_positive("clip_norm", clip_norm, finite=True)
    sample = noise_sampler(noise, **dict(noise_params or {}))
    keys = noise_key_state(seed)

    def update_fn(grads: Any, state: PrivateAggregateState, params: Any = None) -> tuple[Any, Any]:
        private = privatize(grads, step_noise_key(state), clip_norm, sample)
        return keys.update(private, state, params)

    return optax.GradientTransformation(keys.init, update_fn)


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


def dp_update(options: DpSgdOptions) -> Callable:
    """The trainer's update for `optim.name="dp_sgd"`: `update(loss_fn, params, batch, opt_state, optimizer) ->
    (loss, mean unclipped gradient, updates, opt_state)`. It vmaps the objective over the examples, privatises
    with the noise key held in the optimizer's first stage (`noise_key_state`), then applies the optimizer
    (key stage, then SGD) to the private mean gradient."""
    clip_norm = check_positive("clip_norm", options.clip_norm, finite=True)
    sample = noise_sampler(options.noise, **options.noise_params())

    def update(loss_fn: Callable, params: Any, batch: Mapping[str, jax.Array], opt_state: Any,
               optimizer: optax.GradientTransformation) -> tuple[jax.Array, Any, Any, Any]:
        loss = loss_fn(params, batch)
        grads = per_example_grads(loss_fn, params, batch)
        private = privatize(grads, step_noise_key(opt_state[0]), clip_norm, sample)
        updates, opt_state = optimizer.update(private, opt_state, params)
        return loss, jax.tree.map(lambda g: jnp.mean(g, axis=0), grads), updates, opt_state

    return update


def _make_dp_update(cfg: Any) -> Callable:
    if cfg.grad_clip_norm > 0:
        raise ValueError(f"optim.grad_clip_norm must be 0 for optim.name='dp_sgd' (it clips per example with "
                         f"its clip_norm option; a global clip of the stacked per-example gradients is wrong), "
                         f"got {cfg.grad_clip_norm}")
    return dp_update(optimizer_options(cfg, "dp_sgd", DpSgdOptions))


@register_optimizer("dp_sgd", update=_make_dp_update)
def _dp_sgd_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformation:
    """The part of DP-SGD that sees the private mean gradient: the noise-key stage, then SGD (no weight decay).
    The privatisation itself is the declared update (`dp_update`): without it this is plain SGD."""
    options = optimizer_options(cfg, "dp_sgd", DpSgdOptions)
    check_positive("clip_norm", options.clip_norm, finite=True)
    noise_sampler(options.noise, **options.noise_params())
    check_unit_interval("momentum", options.momentum)  # optax.sgd takes any float; >= 1 diverges
    check_int("seed", options.seed, minimum=0, maximum=2**32 - 1)  # jax.random.key overflows beyond
    return optax.chain(noise_key_state(options.seed), optax.sgd(learning_rate, options.momentum or None))
