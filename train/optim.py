"""Builds the optax optimizer a TrainConfig names: schedule, clipping, registered core, accumulation."""

from __future__ import annotations

import optax

from train.config import OptimConfig
from zoo.registry import OPTIMIZERS


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
    if getattr(factory, "needs_two_gradients", False):
        raise ValueError(
            f"optim.name={cfg.name!r} needs two gradient evaluations per step (e.g. SAM), which the shared "
            "train step does not run yet; drive it with its own step helper (zoo.optim.sam_polyak.sam_polyak_step)"
        )
    core = factory(learning_rate_schedule(cfg, num_steps), cfg)
    if cfg.grad_clip_norm > 0:
        core = optax.chain(optax.clip_by_global_norm(cfg.grad_clip_norm), core)
    if cfg.grad_accum_steps > 1:
        return optax.MultiSteps(core, every_k_schedule=cfg.grad_accum_steps)
    return core
