"""Adaptive Policy Backbone (APB): task-specific linear layers before and after a frozen shared backbone.

Paper: "Adaptive Policy Backbone via Shared Network" (B. Park, D. Lee; ICML 2026, arXiv 2509.22310). No
official code: the architecture follows the abstract; widths, initialisation and the
head are a RECONSTRUCTION.

For a task τ with observation o [d_o]:
    h = W_in^τ o + b_in^τ  [d_in],   z = f_θ(h)  [d_out]  (frozen MLP, `depth` tanh layers of `width`),
    y = W_out^τ z + b_out^τ  [k·d_a],  k = 2 for a "gaussian" head ([μ, log σ], SAC-style) or 1 for a
    "deterministic" one (μ); the action is tanh(μ).
Only (W_in, b_in, W_out, b_out) are learned per task: (d_o + 1)·d_in + (d_out + 1)·k·d_a parameters
(`task_param_count`). The backbone is either random (Glorot) and frozen, or meta-trained jointly with the heads
of several tasks and then frozen. It is frozen twice over: `apply` stops its gradient, and `optimizer` masks
it out of the update with optax (`multi_transform` with `set_to_zero`), so its weights stay bit-identical.

Parameters are plain pytrees: {"task": {"w_in", "b_in", "w_out", "b_out"}, "backbone": [{"w", "b"}, ...]};
`mode="full"` is the fully-trained baseline (the same network with a trainable backbone).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from icml26zoo.validation import check_choice, check_int

__all__ = ["HEADS", "MODES", "APBConfig", "action", "apply", "backbone_apply", "init", "init_backbone",
           "init_task", "optimizer", "param_count", "task_param_count"]

HEADS = ("deterministic", "gaussian")
MODES = ("apb", "full")
OUT_SCALE = 0.01  # W_out starts small so that the first actions are ≈ 0


class APBConfig(NamedTuple):
    """Sizes of an APB policy (hashable: static under `jit`). The backbone maps d_in -> width (depth layers),
    so d_out = width."""

    obs_dim: int
    action_dim: int
    d_in: int = 256
    width: int = 256
    depth: int = 2
    head: str = "deterministic"

    def check(self) -> APBConfig:
        """ValueError naming the first field out of range; returns self."""
        check_int("obs_dim (observation dim)", self.obs_dim)
        check_int("action_dim", self.action_dim)
        for name in ("d_in", "width", "depth"):
            check_int(name, getattr(self, name))
        check_choice("head", self.head, HEADS)
        return self

    @property
    def out_dim(self) -> int:
        """Width of the output layer: k·d_a."""
        return (2 if self.head == "gaussian" else 1) * self.action_dim


def _glorot(key: jax.Array, fan_in: int, fan_out: int) -> jax.Array:
    return jax.nn.initializers.glorot_uniform()(key, (fan_in, fan_out))


def init_backbone(key: jax.Array, config: APBConfig) -> list[dict[str, jax.Array]]:
    """The backbone's `depth` layers, Glorot-uniform weights [fan_in, width] and zero biases [width]."""
    config.check()
    sizes = [config.d_in] + [config.width] * config.depth
    keys = jax.random.split(key, config.depth)
    return [{"w": _glorot(k, m, n), "b": jnp.zeros(n)} for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def init_task(key: jax.Array, config: APBConfig) -> dict[str, jax.Array]:
    """A task's layers: W_in [d_o, d_in] Glorot-uniform, W_out [d_out, k·d_a] Glorot × 0.01, zero biases."""
    config.check()
    k_in, k_out = jax.random.split(key)
    return {"w_in": _glorot(k_in, config.obs_dim, config.d_in), "b_in": jnp.zeros(config.d_in),
            "w_out": OUT_SCALE * _glorot(k_out, config.width, config.out_dim), "b_out": jnp.zeros(config.out_dim)}


def init(key: jax.Array, config: APBConfig) -> dict[str, Any]:
    """{"task": init_task, "backbone": init_backbone} from two halves of `key`."""
    k_task, k_backbone = jax.random.split(key)
    return {"task": init_task(k_task, config), "backbone": init_backbone(k_backbone, config)}


def backbone_apply(backbone: list[dict[str, jax.Array]], h: jax.Array) -> jax.Array:
    """f_θ: h [..., d_in] -> z [..., width] through tanh layers."""
    for layer in backbone:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    return h


def apply(params: dict[str, Any], obs: jax.Array, *, mode: str = "apb") -> jax.Array:
    """The head output y [..., k·d_a] for observations [..., d_o]; in "apb" mode no gradient reaches the
    backbone (stop_gradient), in "full" mode it trains like any layer."""
    task, backbone = params["task"], params["backbone"]
    if mode == "apb":
        backbone = jax.lax.stop_gradient(backbone)
    z = backbone_apply(backbone, obs @ task["w_in"] + task["b_in"])
    return z @ task["w_out"] + task["b_out"]


def action(params: dict[str, Any], obs: jax.Array, config: APBConfig, *, mode: str = "apb") -> jax.Array:
    """The deterministic action tanh(μ) [..., d_a] (μ = the first d_a outputs; log σ is not used here)."""
    return jnp.tanh(apply(params, obs, mode=mode)[..., :config.action_dim])


def task_param_count(config: APBConfig) -> int:
    """Trainable parameters per task: (d_o + 1)·d_in + (d_out + 1)·k·d_a."""
    config.check()
    return (config.obs_dim + 1) * config.d_in + (config.width + 1) * config.out_dim


def param_count(tree: Any) -> int:
    """Number of scalars in a pytree of arrays."""
    return sum(int(x.size) for x in jax.tree.leaves(tree))


def optimizer(inner: optax.GradientTransformation, *, mode: str = "apb") -> optax.GradientTransformation:
    """`inner` on the task layers and, in "full" mode, on the backbone too; in "apb" mode the backbone's
    updates are set to zero by optax's masking (multi_transform), so it keeps no optimiser state either."""
    check_choice("mode", mode, MODES)
    frozen = "train" if mode == "full" else "frozen"
    return optax.multi_transform({"train": inner, "frozen": optax.set_to_zero()},
                                 lambda params: {"task": jax.tree.map(lambda _: "train", params["task"]),
                                                 "backbone": jax.tree.map(lambda _: frozen, params["backbone"])})
