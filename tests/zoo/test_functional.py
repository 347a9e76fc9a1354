"""icml26zoo.functional: init equals the NNX modules' parameters (every model and mixer); apply equals their
output and works under jit, grad and vmap (every model, one mixer per family; the rest trace to the right shape)."""

from __future__ import annotations

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo import functional
from icml26zoo.functional import MixerConfig
from icml26zoo.mixers.base import conformance_options
from icml26zoo.models import ModelConfig, language_model_names
from icml26zoo.registry import MIXERS, MODELS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = ModelConfig(
    vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=64, max_seq_len=16
)
BATCH, LENGTH = 2, 8
# One mixer per family: softmax attention, a linear recurrence (delta rule), an SSM, a long convolution.
REPRESENTATIVE_MIXERS = ("attention", "gated_deltanet", "mamba2", "hyena")


def _module(config: ModelConfig | MixerConfig, key: jax.Array) -> nnx.Module:
    if isinstance(config, MixerConfig):
        return MIXERS.get(config.model.mixer)(config.model, rngs=nnx.Rngs(key))
    return MODELS.get(config.name)(config, rngs=nnx.Rngs(key))


def _inputs(config: ModelConfig | MixerConfig) -> jax.Array:
    key = jax.random.key(1)
    if isinstance(config, MixerConfig):
        return jax.random.normal(key, (BATCH, LENGTH, config.model.d_model), jnp.float32)
    return jax.random.randint(key, (BATCH, LENGTH), 0, config.vocab_size, dtype=jnp.int32)


def _call(module: nnx.Module, config: ModelConfig | MixerConfig, inputs: jax.Array) -> jax.Array:
    if isinstance(config, MixerConfig):
        positions = jnp.broadcast_to(jnp.arange(LENGTH, dtype=jnp.int32), (BATCH, LENGTH))
        return module(inputs, segment_ids=None, positions=positions)[0]
    return module(inputs)


@functools.partial(jax.jit, static_argnums=0)
def _transformed(config: ModelConfig | MixerConfig, params: dict, inputs: jax.Array) -> tuple:
    """One compiled program: apply, value_and_grad of a loss, and apply vmapped over rows of inputs."""

    def loss(p: dict) -> jax.Array:
        return jnp.mean(functional.apply(config, p, inputs).astype(jnp.float32) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    per_row = jax.vmap(functional.apply, in_axes=(None, None, 0))(config, params, inputs[:, None])
    return functional.apply(config, params, inputs), value, grads, per_row[:, 0]


def _check_pure_function(config: ModelConfig | MixerConfig, *, compare_nnx_grad: bool) -> None:
    """init equals the module's parameters and apply its output, also under jit; grad is finite (and equals
    nnx.grad when compare_nnx_grad); vmap over input rows equals the batched call."""
    key, inputs = jax.random.key(0), _inputs(config)
    params = functional.init(config, key)
    module = _module(config, key)
    chex.assert_trees_all_equal(params, nnx.to_pure_dict(nnx.state(module)))
    expected = _call(module, config, inputs)
    chex.assert_trees_all_close(functional.apply(config, params, inputs), expected, rtol=1e-5, atol=1e-5)
    out, value, grads, per_row = _transformed(config, params, inputs)
    chex.assert_trees_all_close(out, expected, rtol=1e-5, atol=1e-5)
    chex.assert_trees_all_close(per_row, expected, rtol=1e-5, atol=1e-5)
    assert np.isfinite(float(value))
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(grads))
    chex.assert_trees_all_equal_structs(grads, params)
    if compare_nnx_grad:
        want = nnx.grad(lambda m: jnp.mean(_call(m, config, inputs).astype(jnp.float32) ** 2))(module)
        chex.assert_trees_all_close(grads, nnx.to_pure_dict(want), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", language_model_names())
def test_model_init_apply_jit_grad_vmap(name: str):
    config = dataclasses.replace(CFG, name=name)
    _check_pure_function(config, compare_nnx_grad=True)
    # vmap over keys and params: an ensemble of independently initialized models.
    keys = jax.random.split(jax.random.key(2), 2)
    batched = jax.vmap(functional.init, in_axes=(None, 0))(config, keys)
    outputs = jax.jit(jax.vmap(functional.apply, in_axes=(None, 0, None)), static_argnums=0)(
        config, batched, _inputs(config)
    )
    for i in range(2):
        single = functional.apply(config, functional.init(config, keys[i]), _inputs(config))
        chex.assert_trees_all_close(outputs[i], single, rtol=1e-5, atol=1e-5)


def _mixer_config(mixer: str) -> MixerConfig:
    """The mixer's first conformance variant: the options its harness runs (tiny head_dim included)."""
    options = conformance_options(MIXERS.get(mixer))[0]
    return MixerConfig(dataclasses.replace(CFG, mixer=mixer, mixer_options=options))


@pytest.mark.parametrize("mixer", REPRESENTATIVE_MIXERS)
def test_mixer_init_apply_jit_grad_vmap(mixer: str):
    _check_pure_function(_mixer_config(mixer), compare_nnx_grad=mixer == "attention")


# apply merges init's params into the module's own graph, so once init equals the module's parameters the
# outputs agree by construction: compiling forward, grad and vmap is checked on one mixer per family, and
# every other mixer checks what depends on the mixer (its parameters, and that apply traces to the
# module's output shape and dtype) without compiling anything.
@pytest.mark.parametrize("mixer", [name for name in MIXERS.names() if name not in REPRESENTATIVE_MIXERS])
def test_mixer_init_and_apply_shapes(mixer: str):
    config = _mixer_config(mixer)
    key, inputs = jax.random.key(0), _inputs(config)
    params = functional.init(config, key)
    module = _module(config, key)
    chex.assert_trees_all_equal(params, nnx.to_pure_dict(nnx.state(module)))
    traced = jax.eval_shape(functools.partial(functional.apply, config), params, inputs)
    assert traced == jax.eval_shape(lambda x: _call(module, config, x), inputs)


def test_static_config_jit_and_decode_cache():
    params, tokens = functional.init(CFG, jax.random.key(0)), _inputs(CFG)
    # Compiled sampling may round the last bit differently from the eager ops.
    chex.assert_trees_all_close(jax.jit(functional.init, static_argnums=0)(CFG, jax.random.key(0)), params,
                                rtol=1e-6, atol=1e-7)
    apply = jax.jit(functional.apply, static_argnums=0)
    full = apply(CFG, params, tokens)
    chex.assert_shape(full, (BATCH, LENGTH, CFG.vocab_size))
    # A second config of equal value is the same static argument: no new graphdef, no retrace.
    graphdefs = functional._template.cache_info().currsize
    chex.assert_trees_all_close(apply(dataclasses.replace(CFG), params, tokens), full)
    assert functional._template.cache_info().currsize == graphdefs
    cache = functional.init_cache(CFG, BATCH, LENGTH)
    first, cache = functional.apply(CFG, params, tokens[:, :5], cache=cache)
    rest, cache = jax.jit(functional.apply, static_argnums=0)(CFG, params, tokens[:, 5:], cache=cache)
    chex.assert_trees_all_close(jnp.concatenate([first, rest], axis=1), full, rtol=1e-5, atol=1e-5)
    # The mixer's own cache: decoding in two pieces equals the full forward.
    mixer_cfg = MixerConfig(CFG)
    mixer_params, x = functional.init(mixer_cfg, jax.random.key(3)), _inputs(mixer_cfg)
    mixer_cache = functional.init_cache(mixer_cfg, BATCH, LENGTH)
    y0, mixer_cache = functional.apply(mixer_cfg, mixer_params, x[:, :3], cache=mixer_cache)
    y1, _ = functional.apply(mixer_cfg, mixer_params, x[:, 3:], positions=jnp.broadcast_to(
        jnp.arange(3, LENGTH, dtype=jnp.int32), (BATCH, LENGTH - 3)), cache=mixer_cache)
    chex.assert_trees_all_close(jnp.concatenate([y0, y1], axis=1), functional.apply(mixer_cfg, mixer_params, x),
                                rtol=1e-5, atol=1e-5)


def test_bad_config_and_params_raise_value_error():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="config must be a ModelConfig or a MixerConfig"):
        functional.init({"d_model": 32}, key)
    with pytest.raises(ValueError, match="MixerConfig.model must be a ModelConfig"):
        MixerConfig("attention")
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        functional.init(dataclasses.replace(CFG, name="nope"), key)
    with pytest.raises(ValueError, match="unknown mixer 'nope'"):
        functional.init(MixerConfig(dataclasses.replace(CFG, mixer="nope")), key)
    with pytest.raises(ValueError, match="hashable"):
        functional.init(dataclasses.replace(CFG, mixer_options=(("implementation", ["xla"]),)), key)
    with pytest.raises(ValueError, match="params must be the nested dict that init"):
        functional.apply(CFG, {"embed": {}}, _inputs(CFG))
    with pytest.raises(ValueError, match="must be None when decoding"):
        cache = functional.init_cache(CFG, BATCH, LENGTH)
        functional.apply(CFG, functional.init(CFG, key), _inputs(CFG), positions=jnp.zeros((2, 8), jnp.int32),
                         cache=cache)
