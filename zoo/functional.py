"""Pure-function modules: `init(config, key) -> params` and `apply(config, params, inputs, **kw) -> outputs`.

For projects that do not use NNX: every registered model (a `ModelConfig`) and every registered mixer (a
`MixerConfig`) becomes two pure functions. `params` is a plain nested dict of arrays (`nnx.to_pure_dict`
layout, the same one `nnx.bridge.to_linen` and the trainer's checkpoints use), so it passes through
`jax.jit`, `jax.grad`, `jax.vmap` and optax unchanged. The frozen config is hashable and is the static
argument: `jax.jit(apply, static_argnums=0)`.

    params = init(cfg, jax.random.key(0))
    logits = jax.jit(apply, static_argnums=0)(cfg, params, tokens)

The module structure (`nnx.GraphDef`) is built once per config, abstractly (`nnx.eval_shape`, no
initialization), and cached; `apply` only merges it with `params` (`nnx.merge`), it never rebuilds it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import MIXERS, MODELS
from icml26zoo.validation import check_int

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class MixerConfig:
    """The sequence mixer `model.mixer` as a standalone module, built from `model` (the shared config).

    A mixer reads everything (d_model, heads, mixer_options, ...) from the model config, so this names
    the mixer part of that config: `MixerConfig(ModelConfig(mixer="fox", d_model=64))`.
    """

    model: ModelConfig

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"MixerConfig.model must be a ModelConfig, got {type(self.model).__name__}")


Config = ModelConfig | MixerConfig


def _check_config(config: Any) -> None:
    if not isinstance(config, ModelConfig | MixerConfig):
        raise ValueError(f"config must be a ModelConfig or a MixerConfig, got {type(config).__name__}")
    try:
        hash(config)
    except TypeError as err:
        raise ValueError(
            f"config must be hashable (it is static under jit): give list-valued mixer_options as tuples, "
            f"got {config!r}"
        ) from err


def _build(config: Config, rngs: nnx.Rngs) -> nnx.Module:
    """The NNX module that config names, its parameters initialized from rngs."""
    if isinstance(config, MixerConfig):
        return MIXERS.get(config.model.mixer)(config.model, rngs=rngs)
    return MODELS.get(config.name)(config, rngs=rngs)


@functools.lru_cache(maxsize=128)
def _template(config: Config) -> tuple[nnx.GraphDef, nnx.State, Any]:
    """(graphdef, abstract state of ShapeDtypeStructs, params treedef) of config's module, built once."""
    abstract = nnx.eval_shape(lambda: _build(config, nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    return graphdef, state, jax.tree.structure(nnx.to_pure_dict(state))


def _module(config: Config, params: Params) -> nnx.Module:
    """config's module holding params (a fresh merge of the cached graphdef; params may be tracers)."""
    graphdef, abstract, treedef = _template(config)
    if jax.tree.structure(params) != treedef:
        raise ValueError(
            f"params must be the nested dict that init(config, key) returns for config {config!r}, got a tree "
            f"of structure {jax.tree.structure(params)}"
        )
    # A copy of the cached abstract state, so that filling it in leaves the cache untouched.
    state = jax.tree.map(lambda leaf: leaf, abstract)
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)


def init(config: Config, key: jax.Array) -> Params:
    """The initial parameters of config's module as a plain nested dict of float32 arrays.

    key: a `jax.random.key` (or legacy uint32 key). Equal to `nnx.to_pure_dict(nnx.state(module))` of the
    NNX module built with `nnx.Rngs(key)`. Works under `jax.jit(init, static_argnums=0)` and `jax.vmap`
    over keys (a batch of independent initializations).
    """
    _check_config(config)
    return nnx.to_pure_dict(nnx.state(_build(config, nnx.Rngs(key))))


def _default_positions(inputs: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """[B, T] int32 positions: the index inside each segment, arange(T) without segments."""
    from icml26zoo.models.lm import positions_from_segments

    if segment_ids is not None:
        return positions_from_segments(segment_ids)
    return jnp.broadcast_to(jnp.arange(inputs.shape[1], dtype=jnp.int32), inputs.shape[:2])


def apply(
    config: Config,
    params: Params,
    inputs: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    positions: jax.Array | None = None,
    cache: Any = None,
) -> Any:
    """Runs config's module with params on inputs; pure (no state is kept between calls).

    ModelConfig: inputs are tokens [B, T] int -> logits [B, T, vocab] float32. With `cache` (from
      `init_cache`) the tokens are appended to it (`DecoderLM.decode`; positions and segment_ids must be
      None) and the result is (logits, new cache).
    MixerConfig: inputs are x [B, T, D] -> y [B, T, D]; with `cache`, (y, new cache).
    segment_ids [B, T] int (packed sequences, 0 = padding); positions [B, T] int default to the index
    inside each segment.
    """
    _check_config(config)
    module = _module(config, params)
    if isinstance(config, MixerConfig):
        if positions is None:
            positions = _default_positions(inputs, segment_ids)
        y, new_cache = module(inputs, segment_ids=segment_ids, positions=positions, cache=cache)
        return y if cache is None else (y, new_cache)
    if cache is None:
        return module(inputs, segment_ids=segment_ids, positions=positions)
    if segment_ids is not None or positions is not None:
        raise ValueError(
            "segment_ids and positions must be None when decoding with a cache (positions continue from the "
            f"cache's index), got segment_ids={segment_ids is not None}, positions={positions is not None}"
        )
    return module.decode(inputs, cache)


def init_cache(config: Config, batch_size: int, max_len: int | None = None) -> Any:
    """An empty decode cache (a pytree of arrays) for `apply(..., cache=)`; reads no parameters.

    ModelConfig: a `DecodeCache` for batch_size rows of at most max_len tokens (default
    config.max_seq_len). MixerConfig: the mixer's own cache in the config's compute dtype.
    """
    _check_config(config)
    graphdef, abstract, _ = _template(config)
    module = nnx.merge(graphdef, abstract)
    if isinstance(config, ModelConfig):
        return module.init_cache(batch_size, max_len)
    max_len = config.model.max_seq_len if max_len is None else max_len
    check_int("batch_size", batch_size)
    check_int("max_len", max_len)
    return module.init_cache(batch_size, max_len, jnp.dtype(config.model.compute_dtype))


__all__ = ["MixerConfig", "apply", "init", "init_cache"]
