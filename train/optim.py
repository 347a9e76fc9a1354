"""Builds the optax optimizer a TrainConfig names: schedule, clipping (element-wise, then global norm), registered
core (optionally one per parameter group), accumulation."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import optax

from icml26zoo.registry import OPTIMIZERS, UpdateFn
from icml26zoo.train.config import OptimConfig, check_two_gradient_rules


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
    check_two_gradient_rules(cfg)
    schedule = learning_rate_schedule(cfg, num_steps)
    core = factory(schedule, cfg) if not cfg.param_groups else grouped_core(factory, schedule, cfg)
    if cfg.grad_clip_norm > 0:
        core = optax.chain(optax.clip_by_global_norm(cfg.grad_clip_norm), core)
    if cfg.grad_clip_value > 0:
        core = optax.chain(optax.clip(cfg.grad_clip_value), core)
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


DEFAULT_GROUP = "default"


def grouped_core(factory: Any, schedule: optax.Schedule, cfg: OptimConfig) -> optax.GradientTransformation:
    """One copy of the registered core per `cfg.param_groups` entry (its own learning-rate scale and weight
    decay) plus the default one, each updating only its parameters (optax.multi_transform). Clipping and
    accumulation stay outside, over all parameters together."""
    base = dataclasses.replace(cfg, param_groups=())
    transforms = {DEFAULT_GROUP: factory(schedule, base)}
    for index, (_, lr_scale, weight_decay) in enumerate(cfg.param_groups):
        scaled = lambda step, lr_scale=lr_scale: lr_scale * schedule(step)
        transforms[f"group{index}"] = factory(scaled, dataclasses.replace(base, weight_decay=weight_decay))
    return optax.multi_transform(transforms, lambda params: param_group_labels(cfg.param_groups, params))


def param_group_labels(groups: tuple[tuple[str, float, float], ...], params: Any) -> Any:
    """The group label of every leaf of `params`: "group<i>" for the first pattern its "/"-joined path matches,
    else "default". A pattern that matches no parameter is a ValueError (a typo would silently do nothing)."""
    patterns = [re.compile(pattern) for pattern, _, _ in groups]
    used = [False] * len(patterns)

    def label(path: tuple, _: Any) -> str:
        name = parameter_path(path)
        for index, pattern in enumerate(patterns):
            if pattern.search(name):
                used[index] = True
                return f"group{index}"
        return DEFAULT_GROUP

    labels = jax.tree_util.tree_map_with_path(label, params)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    for index, hit in enumerate(used):
        if not hit:
            example = parameter_path(leaves[0][0]) if leaves else ""
            raise ValueError(f"optim.param_groups[{index}]: pattern {groups[index][0]!r} matches no parameter "
                             f"(paths look like {example!r})")
    return labels


def parameter_path(path: tuple) -> str:
    """A pytree key path as "layers/mixer/in_proj/kernel" (dict keys, sequence indices, attribute names)."""
    parts = []
    for key in path:
        for attribute in ("key", "idx", "name"):
            if hasattr(key, attribute):
                parts.append(str(getattr(key, attribute)))
                break
    return "/".join(parts)


LORA_LEAVES = ("lora_a", "lora_b")  # the factor names of flax's nnx.LoRA (zoo.lora adapters)


def lora_trainable(params: Any) -> Any:
    """True for LoRA factors (leaves named lora_a / lora_b), False for the frozen rest, per leaf."""
    return jax.tree_util.tree_map_with_path(lambda path, _: parameter_path(path).rsplit("/", 1)[-1] in LORA_LEAVES,
                                            params)


def train_only(optimizer: optax.GradientTransformation, trainable: Any) -> optax.GradientTransformation:
    """`optimizer` on the leaves `trainable(params)` marks, zero updates (and no state) for the rest.

    The whole rule, clipping and accumulation included, sees only the trainable leaves, so a global-norm
    clip measures the adapters' gradient alone; frozen leaves get exact zeros and stay bit-identical."""
    labels = lambda params: jax.tree.map(lambda t: "train" if t else "frozen", trainable(params))
    return optax.multi_transform({"train": optimizer, "frozen": optax.set_to_zero()}, labels)


def check_lora_rank(model: Any, rank: int, targets: tuple[str, ...]) -> None:
    """ValueError naming lora_rank when it exceeds min(in, out) of a linear layer `targets` selects (a
    rank above the width adds nothing a full update could not and wastes compute)."""
    from icml26zoo.lora import linear_layers, matches_target

    for path, (_, _, linear) in linear_layers(model).items():
        if any(matches_target(path, pattern) for pattern in targets):
            width = min(linear.in_features, linear.out_features)
            if rank > width:
                raise ValueError(f"lora_rank must be at most the adapted layers' width, got {rank} > {width} "
                                 f"(layer {path}: {linear.in_features} -> {linear.out_features})")
