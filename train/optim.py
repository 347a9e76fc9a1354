"""Builds the optax optimizer a TrainConfig names: schedule, clipping, registered core, accumulation."""

from __future__ import annotations

import optax

from icml26zoo.registry import OPTIMIZERS, UpdateFn
from icml26zoo.train.config import OptimConfig


def learning_rate_schedule(cfg: OptimConfig, num_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to the peak, then cosine decay to `end_lr_fraction` of it at `num_steps`."""
    warmup = min(cfg.warmup_steps, max(num_steps - 1, 0))
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.learning_rate,
        warmup_steps=warmup,
        decay_steps=max(num_steps, warmup + 1),
        end_value=cfg.learning_rate * cfg.end_lr_fraction,
    )


def build_optimizer(cfg: OptimConfig, num_steps: int) -> optax.GradientTransformation:
    """The full update rule; with `grad_accum_steps > 1` every call is one micro-step (optax.MultiSteps)."""
    factory = OPTIMIZERS.get(cfg.name)
    if custom_update(cfg) is not None and cfg.grad_accum_steps > 1:
        raise ValueError(
            f"optim.grad_accum_steps must be 1 for optim.name={cfg.name!r}, which takes two gradients per step "
            f"(optax.MultiSteps drops the extra arguments it needs), got {cfg.grad_accum_steps}"
        )
    core = factory(learning_rate_schedule(cfg, num_steps), cfg)
    if cfg.grad_clip_norm > 0:
        core = optax.chain(optax.clip_by_global_norm(cfg.grad_clip_norm), core)
    if cfg.grad_accum_steps > 1:
        return optax.MultiSteps(core, every_k_schedule=cfg.grad_accum_steps)
    return core


def custom_update(cfg: OptimConfig) -> UpdateFn | None:
    """The optimizer's declared update, or None for the default single-gradient step.

    An optimizer that needs more than `optimizer.update(grads, state, params)` (SAM's second gradient,
    Polyak's loss value) declares `register_optimizer(name, update=make_update)`; `make_update(cfg)` returns
    `update(loss_fn, params, batch, opt_state, optimizer) -> (loss, grads, updates, opt_state)`.
    """
    make_update = OPTIMIZERS.update(cfg.name)
    return None if make_update is None else make_update(cfg)
