"""The mixture-of-experts feed-forward layer: a registered router picks k of E expert MLPs per token.

    y_t = Σ_{s < k} w_{t,s} · Expert_{e(t,s)}(x_t)

e(t, s) and the gates come from the router (`MoEConfig.router`, looked up in `zoo.moe.registry.ROUTERS`);
the router may reweight once the expert outputs are known (ConfSMoE). Experts are SwiGLU or GELU MLPs
with stacked weights [E, ...], run by one grouped matmul per projection (`icml26zoo.kernels.grouped_matmul`).
With a capacity factor, an expert keeps at most ceil(factor · N · k / E) assignments (first choices first, then
token order) and a dropped assignment contributes nothing (the residual stream carries the token on).
With an "expert" axis in the context mesh the experts are sharded over it and tokens reach them by
all-to-all (`zoo.moe.expert_parallel`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels import grouped_matmul
from icml26zoo.kernels.grouped_matmul.api import IMPLEMENTATIONS
from icml26zoo.moe.capacity import capacity_keep, expert_capacity
from icml26zoo.moe.expert_parallel import expert_axis_size, expert_parallel_experts
from icml26zoo.moe.registry import ROUTERS, router_options
from icml26zoo.moe.routers import balance_losses, masked_mean
from icml26zoo.validation import check_choice, check_int, check_non_negative, check_pairs, check_positive

ACTIVATIONS = ("swiglu", "gelu")


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """One MoE feed-forward layer. Every field is validated on construction (ValueError names the field)."""

    # Experts E.
    num_experts: int = 8
    # Experts per token k (<= num_experts).
    top_k: int = 2
    # Registered router name (zoo.moe.registry.ROUTERS).
    router: str = "topk_softmax"
    # None: every assignment is kept (dropless); else each expert keeps ceil(factor · N · k / E).
    capacity_factor: float | None = None
    # Weight of the Switch load-balancing loss (routers with BALANCED = True; not ConfSMoE's).
    load_balance_weight: float = 0.01
    # Weight of the router z-loss (routers with Z_LOSS = True: linear-logit routers).
    z_loss_weight: float = 1e-3
    # Grouped matmul path (`icml26zoo.kernels.grouped_matmul`): None (the backend default, "xla"), "reference"
    # (one-hot contraction) or "xla" (`jax.lax.ragged_dot`).
    implementation: str | None = None
    # The router's own options as (name, value) pairs (its OPTIONS dataclass).
    router_options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_experts", "top_k"):
            check_int(name, getattr(self, name))
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k must be at most num_experts = {self.num_experts}, got {self.top_k}")
        if self.capacity_factor is not None:  # None: no dropping
            check_positive("capacity_factor", self.capacity_factor)
        for name in ("load_balance_weight", "z_loss_weight"):
            check_non_negative(name, getattr(self, name))
        if self.implementation is not None:  # None: the backend default
            check_choice("implementation", self.implementation, IMPLEMENTATIONS)
        check_choice("router", self.router, ROUTERS.names())
        check_pairs("router_options", self.router_options)
        router_options(self.router, self.router_options)


class MoEFeedForward(nnx.Module):
    """x [..., D] -> (y [..., D], aux): k of E expert MLPs (hidden width F) per token, chosen by the router.

    aux holds float32 arrays: "loss" (the weighted auxiliary losses, a scalar), the unweighted
    "load_balance" and "router_z" (whether or not the router adds them), "load" [E] (share of kept
    assignments per expert), "dropped" (share of real tokens' assignments dropped by capacity),
    "router_entropy" (mean entropy of the router's probabilities), "cooccurrence" [E, E] (share of tokens
    routed to both experts i and j; the diagonal is each expert's usage frequency) and the
    router's extras reshaped to x's leading axes (ConfSMoE: "confidence" [..., k], "class_logits" [..., k, C]).
    """

    def __init__(self, dim: int, hidden_dim: int, config: MoEConfig, *, activation: str = "swiglu",
                 num_classes: int = 0, dtype: jnp.dtype = jnp.float32, rngs: nnx.Rngs) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
        self.config, self.activation, self.dtype = config, activation, dtype
        options = router_options(config.router, config.router_options)
        self.router = ROUTERS.get(config.router)(
            dim, config.num_experts, config.top_k, options, num_classes=num_classes, rngs=rngs
        )
        lecun = jax.nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
        experts = config.num_experts
        self.w_up = nnx.Param(lecun(rngs.params(), (experts, dim, hidden_dim), jnp.float32))
        self.w_gate = (nnx.Param(lecun(rngs.params(), (experts, dim, hidden_dim), jnp.float32))
                       if activation == "swiglu" else None)
        self.w_down = nnx.Param(lecun(rngs.params(), (experts, hidden_dim, dim), jnp.float32))

    def experts(self, rows: jax.Array, group_ids: jax.Array) -> jax.Array:
        """Expert group_ids[m]'s MLP on rows [M, D] -> [M, D]; id E (dropped) gives zeros. With an "expert"
        mesh axis in context, experts run sharded over it (`zoo.moe.expert_parallel`)."""
        weights = (self.w_up[...], None if self.w_gate is None else self.w_gate[...], self.w_down[...])
        if expert_axis_size() > 1:
            return expert_parallel_experts(self._expert_mlp, rows, group_ids, weights, self.config.num_experts,
                                           self.config.top_k)
        return self._expert_mlp(rows, group_ids, *weights)

    def _expert_mlp(self, rows: jax.Array, group_ids: jax.Array, w_up: jax.Array, w_gate: jax.Array | None,
                    w_down: jax.Array) -> jax.Array:
        """rows [M, D], group_ids [M] in [0, G], weights with leading axis G (G = dropped) -> [M, D]."""
        gmm = lambda x, w: grouped_matmul(x, w, group_ids, implementation=self.config.implementation)  # noqa: E731
        up = gmm(rows, w_up)
        if self.activation == "swiglu":
            hidden = jax.nn.silu(gmm(rows, w_gate)) * up
        else:
            hidden = jax.nn.gelu(up, approximate=False)
        return gmm(hidden, w_down)

    def __call__(
        self, x: jax.Array, *, mask: jax.Array | None = None, rng: jax.Array | None = None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """x [..., D]; mask [...] bool marks real tokens (default all; padding gets no expert and no loss)."""
        lead, dim = x.shape[:-1], x.shape[-1]
        if mask is not None and mask.shape != lead:
            raise ValueError(f"mask must have shape {lead} (x's leading axes), got {mask.shape}")
        flat = x.reshape(-1, dim).astype(self.dtype)
        mask = jnp.ones(flat.shape[:1], jnp.bool_) if mask is None else mask.reshape(-1).astype(jnp.bool_)
        cfg = self.config
        routing = self.router(flat, mask, rng)
        capacity = expert_capacity(flat.shape[0], cfg.top_k, cfg.num_experts, cfg.capacity_factor)
        keep = capacity_keep(routing.indices, mask, cfg.num_experts, capacity)  # [N, k]
        group_ids = jnp.where(keep, routing.indices, cfg.num_experts).reshape(-1)
        rows = jnp.repeat(flat, cfg.top_k, axis=0)  # row n·k + s is token n's slot s
        slot_outputs = self.experts(rows, group_ids).reshape(-1, cfg.top_k, dim)  # [N, k, D]
        weights, extras = self.router.combine(routing, slot_outputs)
        weights = weights * keep.astype(weights.dtype)
        y = jnp.sum(slot_outputs.astype(jnp.float32) * weights[..., None], axis=1).astype(self.dtype)
        aux = self._aux(routing, keep, mask)
        aux.update({name: value.reshape(*lead, *value.shape[1:]) for name, value in extras.items()})
        return y.reshape(*lead, dim), aux

    def _aux(self, routing: Any, keep: jax.Array, mask: jax.Array) -> dict[str, jax.Array]:
        cfg = self.config
        losses = balance_losses(routing, mask)
        loss = jnp.zeros((), jnp.float32)
        if self.router.BALANCED:
            loss = loss + cfg.load_balance_weight * losses["load_balance"]
        if self.router.Z_LOSS:
            loss = loss + cfg.z_loss_weight * losses["router_z"]
        kept_ids = jnp.where(keep, routing.indices, cfg.num_experts)
        counts = jnp.sum(jax.nn.one_hot(kept_ids, cfg.num_experts, dtype=jnp.float32), axis=(0, 1))
        real_pairs = jnp.sum(mask.astype(jnp.float32)) * cfg.top_k
        dropped = 1.0 - jnp.sum(keep.astype(jnp.float32)) / jnp.maximum(real_pairs, 1.0)
        chosen = jnp.sum(jax.nn.one_hot(routing.indices, cfg.num_experts, dtype=jnp.float32), axis=1)  # [N, E]
        token_entropy = -jnp.sum(routing.probs * jnp.log(jnp.maximum(routing.probs, 1e-30)), axis=-1)
        return {"loss": loss, "load_balance": losses["load_balance"], "router_z": losses["router_z"],
                "load": counts / jnp.maximum(jnp.sum(counts), 1.0), "dropped": dropped,
                "router_entropy": masked_mean(token_entropy, mask),
                "cooccurrence": masked_mean(chosen[:, :, None] * chosen[:, None, :], mask)}
