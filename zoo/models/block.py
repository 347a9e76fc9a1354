"""The decoder block and the layer stack: scanned (stacked parameters) or unrolled (a list).

Scanned layers hold every parameter with a leading [num_layers] axis and run under one `jax.lax.scan`,
so compile time does not grow with depth. Unrolled layers are an `nnx.List` of blocks run by a Python
loop. `stack_layers` / `unstack_layers` convert parameter dicts between the two layouts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers.mlp import build_mlp
from icml26zoo.layers.residual import Residual
from icml26zoo.models.config import ModelConfig
from icml26zoo.moe.layer import MoEFeedForward
from icml26zoo.registry import MIXERS


def block_residual(cfg: ModelConfig) -> Residual:
    """The residual wrapper of one sublayer: cfg.norm_placement, with cfg.norm ("rmsnorm" or "dyt") as its norms."""
    return Residual(cfg.norm_placement, cfg.d_model, eps=cfg.norm_eps, norm=cfg.norm)


def build_feed_forward(cfg: ModelConfig, *, rngs: nnx.Rngs) -> nnx.Module:
    """The block's MLP (cfg.mlp_activation), or with cfg.moe set a `zoo.moe.MoEFeedForward` of that config."""
    dtype = jnp.dtype(cfg.compute_dtype)
    if cfg.moe is None:
        return build_mlp(cfg.mlp_activation, cfg.d_model, cfg.resolved_mlp_dim, dtype=dtype, rngs=rngs)
    return MoEFeedForward(cfg.d_model, cfg.resolved_mlp_dim, cfg.resolved_moe, activation=cfg.mlp_activation,
                          num_classes=cfg.vocab_size, dtype=dtype, rngs=rngs)


class Block(nnx.Module):
    """One decoder layer: x -> Residual(mixer) -> Residual(MLP), both with cfg.norm_placement and cfg.norm.

    The MLP is SwiGLU or GELU (cfg.mlp_activation), or a mixture of such experts (cfg.moe set,
    `zoo.moe`). With cfg.mlp_dim == 0 the MLP sublayer (and its norm) is absent: x -> Residual(mixer).
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.mixer_residual = block_residual(cfg)
        self.mixer = MIXERS.get(cfg.mixer)(cfg, rngs=rngs)
        self.has_mlp = cfg.resolved_mlp_dim > 0
        self.has_moe = cfg.moe is not None
        if self.has_mlp:
            self.mlp_residual = block_residual(cfg)
            self.mlp = build_feed_forward(cfg, rngs=rngs)

    def __call__(
        self,
        x: jax.Array,
        *,
        segment_ids: jax.Array | None,
        positions: jax.Array,
        cache: Any = None,
        capture: bool = False,
    ) -> tuple[jax.Array, Any]:
        """x: [B, T, D] -> (x' [B, T, D], the mixer's updated cache or None); see `forward_with_aux`."""
        x, new_cache, _ = self.forward_with_aux(
            x, segment_ids=segment_ids, positions=positions, cache=cache, capture=capture
        )
        return x, new_cache

    def forward_with_aux(
        self,
        x: jax.Array,
        *,
        segment_ids: jax.Array | None,
        positions: jax.Array,
        cache: Any = None,
        capture: bool = False,
    ) -> tuple[jax.Array, Any, dict[str, jax.Array]]:
        """x: [B, T, D] -> (x' [B, T, D], the mixer's updated cache or None, aux).

        aux is the MoE feed-forward's auxiliary output (`zoo.moe.MoEFeedForward`: "loss", "load", ...) and
        an empty dict for a dense MLP. MoE padding tokens (segment_ids == 0) get no expert and no loss.

        capture=True sows (`nnx.Intermediate`, read with `nnx.capture`) what each sublayer receives and
        returns, mixer_in / mixer_out / mlp_in / mlp_out [B, T, D], and the residual stream after the mixer
        sublayer, after_mixer [B, T, D] (zoo.diagnostics). With capture=False nothing is recorded and the
        traced computation is unchanged.
        """

        def record(name: str, value: jax.Array) -> None:
            if capture:
                self.sow(nnx.Intermediate, name, value)

        def mix(h: jax.Array) -> tuple[jax.Array, Any]:
            record("mixer_in", h)
            y, new_cache = self.mixer(h, segment_ids=segment_ids, positions=positions, cache=cache)
            record("mixer_out", y)
            return y, new_cache

        def mlp(h: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
            record("mlp_in", h)
            if self.has_moe:
                y, aux = self.mlp(h, mask=None if segment_ids is None else segment_ids > 0)
            else:
                y, aux = self.mlp(h), {}
            record("mlp_out", y)
            return y, aux

        x, new_cache = self.mixer_residual(x, mix)
        record("after_mixer", x)
        aux = {}
        if self.has_mlp:
            x, aux = self.mlp_residual(x, mlp)
        return x, new_cache, aux


def build_layers(cfg: ModelConfig, *, rngs: nnx.Rngs) -> nnx.Module:
    """cfg.num_layers blocks: one Block with stacked [L, ...] params if cfg.scan_layers, else an nnx.List."""
    if not cfg.scan_layers:
        return nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])

    # vmap the constructor over split RNG streams: every layer gets its own initialization, and the
    # parameters come out stacked along axis 0, the layout `jax.lax.scan` consumes.
    @nnx.split_rngs(splits=cfg.num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make_stacked(layer_rngs: nnx.Rngs) -> Block:
        return Block(cfg, rngs=layer_rngs)

    return make_stacked(rngs)


def init_layer_caches(layers: nnx.Module, cfg: ModelConfig, batch_size: int, max_len: int) -> Any:
    """Per-layer mixer caches: stacked [L, ...] leaves for scanned layers, else a tuple of L caches."""
    dtype = jnp.dtype(cfg.compute_dtype)
    if cfg.scan_layers:
        one = layers.mixer.init_cache(batch_size, max_len, dtype)
        return jax.tree.map(lambda a: jnp.broadcast_to(a, (cfg.num_layers, *a.shape)), one)
    return tuple(layer.mixer.init_cache(batch_size, max_len, dtype) for layer in layers)


def run_layers(
    layers: nnx.Module,
    x: jax.Array,
    *,
    cfg: ModelConfig,
    segment_ids: jax.Array | None,
    positions: jax.Array,
    caches: Any = None,
    return_aux: bool = False,
) -> tuple[jax.Array, Any] | tuple[jax.Array, Any, dict[str, jax.Array]]:
    """Applies the layer stack to x [B, T, D]; returns (x [B, T, D], updated caches or None).

    Each layer runs as a pure function of its parameter state (split / merge), so the same code serves
    `lax.scan` and the unrolled loop, and `jax.checkpoint` (cfg.remat) wraps exactly one layer.
    return_aux=True also returns the blocks' auxiliary outputs (`Block.forward_with_aux`), each leaf stacked
    over layers [L, ...] (an empty dict without MoE).
    """

    def apply(graphdef: nnx.GraphDef, state: nnx.State, h: jax.Array, cache: Any) -> tuple[jax.Array, Any]:
        layer = nnx.merge(graphdef, state)
        h, new_cache, aux = layer.forward_with_aux(h, segment_ids=segment_ids, positions=positions, cache=cache)
        return h, (new_cache, aux)

    if cfg.remat:
        # Inside scan, CSE cannot merge the recomputation with the forward, so prevent_cse is not needed.
        apply = jax.checkpoint(apply, static_argnums=(0,), prevent_cse=not cfg.scan_layers)

    if cfg.scan_layers:
        graphdef, state = nnx.split(layers)

        def body(h: jax.Array, layer_inputs: tuple[nnx.State, Any]) -> tuple[jax.Array, Any]:
            return apply(graphdef, layer_inputs[0], h, layer_inputs[1])

        x, (new_caches, aux) = jax.lax.scan(body, x, (state, caches))
    else:
        new_caches, per_layer = [], []
        for i, layer in enumerate(layers):
            graphdef, state = nnx.split(layer)
            x, (new_cache, layer_aux) = apply(graphdef, state, x, None if caches is None else caches[i])
            new_caches.append(new_cache)
            per_layer.append(layer_aux)
        new_caches = None if caches is None else tuple(new_caches)
        aux = jax.tree.map(lambda *leaves: jnp.stack(leaves), *per_layer)
    return (x, new_caches, aux) if return_aux else (x, new_caches)


def unstack_layers(params: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """Scanned -> unrolled layout of a pure parameter dict (`nnx.to_pure_dict(state)`).

    `params["layers"]` holds leaves [L, ...]; the result holds `params["layers"][i]` with leaves [...].
    Every other entry is shared unchanged.
    """
    stacked = params["layers"]
    for leaf in jax.tree.leaves(stacked):
        if leaf.shape[:1] != (num_layers,):
            raise ValueError(
                f"stacked layer parameters must have leading axis {num_layers}, got {leaf.shape}"
            )
    layers = {i: jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(num_layers)}
    return {**params, "layers": layers}


def stack_layers(params: dict[str, Any]) -> dict[str, Any]:
    """Unrolled -> scanned layout: `params["layers"]` {0: tree, 1: tree, ...} becomes one tree of [L, ...]."""
    per_layer = params["layers"]
    keys = sorted(per_layer)
    if keys != list(range(len(keys))):
        raise ValueError(f"unrolled layers must be keyed 0..L-1, got keys {keys}")
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(per_layer[i] for i in keys))
    return {**params, "layers": stacked}


def convert_layer_layout(model: nnx.Module, *, scan_layers: bool) -> nnx.Module:
    """A copy of `model` (which has a `.cfg`) in the requested layer layout, with the same parameters.

    Builds the target structure abstractly (`nnx.eval_shape`, no initialization), then fills it with
    the model's parameters stacked or unstacked.
    """
    cfg = dataclasses.replace(model.cfg, scan_layers=scan_layers)
    abstract = nnx.eval_shape(lambda: type(model)(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    if model.cfg.scan_layers and not scan_layers:
        params = unstack_layers(params, cfg.num_layers)
    elif scan_layers and not model.cfg.scan_layers:
        params = stack_layers(params)
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)
