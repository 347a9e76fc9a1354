"""The looped transformer (zoo.models.looped): unrolling invariants, the loop schedule, decoding, bad options."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.models import ModelConfig, build_model, convert_layer_layout
from icml26zoo.models.block import run_layers
from icml26zoo.models.looped import LoopedOptions

pytestmark = pytest.mark.usefixtures("fast_compile")

TINY = {"vocab_size": 32, "d_model": 16, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "max_seq_len": 16}
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


@nnx.jit
def _forward(model: nnx.Module, tokens: jax.Array) -> jax.Array:
    return model(tokens)


def _looped(scan_layers: bool = True, **options) -> nnx.Module:
    cfg = ModelConfig(name="looped", scan_layers=scan_layers, model_options=tuple(options.items()), **TINY)
    return build_model(cfg, rngs=nnx.Rngs(0))


def _tokens(length: int) -> jax.Array:
    return jax.random.randint(jax.random.key(1), (2, length), 0, TINY["vocab_size"], dtype=jnp.int32)


def _core_params(model: nnx.Module) -> dict:
    """The tied core's parameters as one unrolled layer's tree (leaves without the [num_layers=1] axis)."""
    return jax.tree.map(lambda a: a[0], nnx.to_pure_dict(nnx.state(model.layers, nnx.Param)))


def test_loops_equal_a_llama_stack_of_tied_layers():
    """T loops of one layer, no prelude, no re-injection = "llama" with T layers all holding that layer."""
    looped = _looped(loops=3, prelude_layers=0, reinject=False)
    llama = build_model(ModelConfig(**{**TINY, "num_layers": 3}, scan_layers=False), rngs=nnx.Rngs(5))
    state = nnx.state(llama, nnx.Param)
    shared = nnx.to_pure_dict(nnx.state(looped, nnx.Param))
    params = {name: shared[name] for name in nnx.to_pure_dict(state) if name != "layers"}
    nnx.replace_by_pure_dict(state, {**params, "layers": {i: _core_params(looped) for i in range(3)}})
    nnx.update(llama, state)
    tokens = _tokens(10)
    np.testing.assert_allclose(_forward(looped, tokens), _forward(llama, tokens), **TOLERANCE)


def test_reinjection_and_prelude_follow_the_definition():
    """h = prelude(e); h = core(h) then h = core(h + e): the scanned loop against an explicit Python loop."""
    model = _looped(loops=2, prelude_layers=1, reinject=True)
    tokens = _tokens(9)
    embedded = model.embed(tokens)
    positions = jnp.broadcast_to(jnp.arange(9, dtype=jnp.int32), tokens.shape)
    h, _ = model.prelude[0](embedded, segment_ids=None, positions=positions)
    for index in range(2):
        h = h + embedded if index else h
        h, _ = run_layers(model.layers, h, cfg=model.cfg, segment_ids=None, positions=positions)
    np.testing.assert_allclose(_forward(model, tokens), model.logits_from_hidden(h), **TOLERANCE)
    unrolled = convert_layer_layout(model, scan_layers=False)
    np.testing.assert_allclose(_forward(unrolled, tokens), _forward(model, tokens), **TOLERANCE)


@pytest.mark.parametrize(
    "loops, multiplier, length, expected",
    [("log2", 1.0, 8, 3), ("log2", 1.0, 9, 4), ("log2", 2.0, 25, 10), ("linear", 0.5, 7, 4), (6, 3.0, 100, 6),
     ("log2", 1.0, 1, 1)],
)
def test_loop_schedule(loops, multiplier, length, expected):
    assert LoopedOptions(loops=loops, loop_multiplier=multiplier).num_loops(length) == expected


def test_length_dependent_loops_forward_and_decode():
    """"log2" on 9 tokens runs 4 loops: the fixed 4-loop model with the same parameters; decoding with
    max_len 16 (4 loops) gives the same logits token by token."""
    scheduled = _looped(loops="log2")
    fixed = _looped(loops=4)
    nnx.update(fixed, nnx.state(scheduled))
    tokens = _tokens(9)
    expected = _forward(fixed, tokens)
    np.testing.assert_allclose(_forward(scheduled, tokens), expected, **TOLERANCE)
    assert not np.allclose(_forward(_looped(loops=3), tokens), expected, atol=1e-3)
    decode = jax.jit(lambda model, t, cache: model.decode(t, cache))
    cache, steps = scheduled.init_cache(2, max_len=16), []
    for chunk in (tokens[:, :5], tokens[:, 5:6], tokens[:, 6:]):
        logits, cache = decode(scheduled, chunk, cache)
        steps.append(logits)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), expected, **TOLERANCE)


@pytest.mark.parametrize(
    "options, match",
    [
        ((("loops", 0),), r"model.model_options option 'loops' must be an integer in \[1, 1024\], got 0"),
        ((("loops", "log3"),), r"'loops' must be an integer or one of \['log2', 'linear'\], got 'log3'"),
        ((("loops", True),), r"looped model option 'loops' must be an integer or a string, got True"),
        ((("loop_multiplier", 0.0),), r"'loop_multiplier' must be a finite positive number, got 0.0"),
        ((("prelude_layers", -1),), r"'prelude_layers' must be an integer >= 0, got -1"),
        ((("depth", 2),), r"model.model_options: unknown looped model option 'depth'; valid options"),
    ],
)
def test_bad_options_raise(options, match):
    cfg = dataclasses.replace(ModelConfig(name="looped", **TINY), model_options=options)
    with pytest.raises(ValueError, match=match):
        build_model(cfg, rngs=nnx.Rngs(0))


def test_scanned_program_size_independent_of_the_loop_count():
    """The loop is one scan: the lowered program has as many matmuls for 2 loops as for 7 (and for "log2" on any
    length), so compile time does not grow with the loop count."""

    def dot_count(loops, length=8):
        model = nnx.eval_shape(lambda: _looped(loops=loops))
        graphdef, params = nnx.split(model)
        tokens = jax.ShapeDtypeStruct((2, length), jnp.int32)
        lowered = jax.jit(lambda p, t: nnx.merge(graphdef, p)(t)).lower(params, tokens)
        return lowered.as_text().count("dot_general")

    assert dot_count(2) == dot_count(7) == dot_count("log2", 16)
