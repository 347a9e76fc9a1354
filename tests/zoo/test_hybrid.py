"""Hybrid pattern stacks (zoo.models.hybrid): layer types, equality with the plain stacks, bad patterns."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.models import ModelConfig, build_model
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

TINY = {"vocab_size": 32, "d_model": 16, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "max_seq_len": 16,
        "scan_layers": False}


def _hybrid(pattern: str, **overrides) -> ModelConfig:
    return ModelConfig(name="hybrid", model_options=(("pattern", pattern),), **{**TINY, **overrides})


def test_pattern_repeats_over_the_layers_and_options_reach_their_mixer():
    cfg = _hybrid("deltanet, mamba2,attention", num_layers=6, mixer="attention", mixer_options=(("qk_norm", True),))
    model = nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0)))
    expected = ["deltanet", "mamba2", "attention"] * 2
    assert [type(layer.mixer) for layer in model.layers] == [MIXERS.get(name) for name in expected]
    # The other mixers would reject the unknown option 'qk_norm': building at all shows it did not reach them.
    assert all(model.layers[i].mixer.q_norm is not None for i in (2, 5))


def test_all_attention_pattern_is_the_llama_stack():
    """Same parameters, same logits as "llama" (unrolled): the builder adds nothing of its own."""
    hybrid = build_model(_hybrid("attention"), rngs=nnx.Rngs(0))
    llama = build_model(ModelConfig(**TINY), rngs=nnx.Rngs(1))
    nnx.update(llama, nnx.state(hybrid, nnx.Param))
    tokens = jax.random.randint(jax.random.key(2), (2, 7), 0, 32, dtype=jnp.int32)
    forward = nnx.jit(lambda model, tokens: model(tokens))
    np.testing.assert_array_equal(forward(hybrid, tokens), forward(llama, tokens))


@pytest.mark.parametrize(
    "cfg, match",
    [
        (lambda: _hybrid("gdn,attention"),
         r"model.model_options option 'pattern' names unknown mixer 'gdn' at position 0 .*valid mixers: \['attention'"),
        (lambda: _hybrid("attention,,deltanet"), r"option 'pattern' must be comma-separated.*'attention,,deltanet'"),
        (lambda: _hybrid("attention,deltanet", num_layers=3),
         r"num_layers must be a multiple of the model.model_options pattern's length 2.*got num_layers=3"),
        (lambda: _hybrid("attention,deltanet", scan_layers=True),
         r"scan_layers must be False for a hybrid pattern of different mixers \('attention,deltanet'"),
        (lambda: ModelConfig(name="hybrid", model_options=(("layers", "attention"),), **TINY),
         r"model.model_options: unknown hybrid model option 'layers'; valid options: \['pattern'\]"),
        (lambda: ModelConfig(name="llama", model_options=(("pattern", "attention"),)),
         r"model.model_options: model 'llama' takes no options"),
    ],
    ids=["unknown-mixer", "empty-name", "not-a-multiple", "scanned", "unknown-option", "llama-options"],
)
def test_bad_patterns_raise(cfg, match):
    with pytest.raises(ValueError, match=match):
        nnx.eval_shape(lambda: build_model(cfg(), rngs=nnx.Rngs(0)))


def test_empty_pattern_is_the_plain_scanned_stack_of_cfg_mixer():
    cfg = ModelConfig(name="hybrid", **{**TINY, "scan_layers": True, "mixer": "deltanet"})
    model = nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0)))
    llama = nnx.eval_shape(lambda: build_model(dataclasses.replace(cfg, name="llama"), rngs=nnx.Rngs(0)))
    assert model.mixers == ("deltanet", "deltanet") and isinstance(model.layers.mixer, MIXERS.get("deltanet"))
    shapes = nnx.to_pure_dict(nnx.state(llama, nnx.Param))
    assert jax.tree.map(np.shape, nnx.to_pure_dict(nnx.state(model, nnx.Param))) == jax.tree.map(np.shape, shapes)


def test_model_options_must_be_pairs():
    with pytest.raises(ValueError, match=r"model_options must be a tuple of \(name, value\) pairs, got 'attention'"):
        dataclasses.replace(ModelConfig(), model_options="attention")
