"""Conformance harness: every registered model × mixer (× the mixer's CONFORMANCE_OPTIONS variants).

A new mixer or model gets these checks by registering itself; nothing here names one. Each case builds
a tiny model once (module-scoped fixture) and reuses jitted functions, so a case runs in seconds on CPU.
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.mixers.base import conformance_options
from icml26zoo.models import (
    ModelConfig,
    build_model,
    convert_layer_layout,
    count_params,
    language_model_names,
    stack_layers,
)
from icml26zoo.registry import MIXERS, MODELS

pytestmark = pytest.mark.usefixtures("fast_compile")

# The one tolerance table (per compute dtype). Loosening an entry is a decision for the commit message.
TOLERANCES = {
    "float32": {"atol": 1e-5, "rtol": 1e-5},
    "bfloat16": {"atol": 5e-2, "rtol": 5e-2},
}
# Gradients of past logits w.r.t. future inputs must vanish exactly: masks act before any exp, so a
# masked contribution is an exact zero, and any nonzero value is a leak, however small. The one exception
# is a mixer that declares CAUSAL_ROUNDOFF (an FFT convolution, whose round-off spreads ~1e-7 of every
# input over all outputs): its future influence may reach that bound, never more. Rows never mix in any case.
CAUSAL_LEAK_TOLERANCE = 0.0


def _causal_leak_tolerance(cfg: ModelConfig) -> float:
    return float(getattr(MIXERS.get(cfg.mixer), "CAUSAL_ROUNDOFF", CAUSAL_LEAK_TOLERANCE))

BATCH, LENGTH, VOCAB = 2, 12, 64
VARIANT_MIXERS = ("attention", "gated_deltanet")
TINY = {
    "vocab_size": VOCAB,
    "d_model": 32,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "max_seq_len": 32,
}


def _cases(primary_only: bool = False, with_declared: bool = True):
    """Every registered model x mixer x CONFORMANCE_OPTIONS variant (or only each mixer's first variant).

    A model whose class declares CONFORMANCE_CONFIGS (ModelConfig overrides, e.g. a mixer and model_options)
    enters with those cases instead of once per mixer, since its mixers already enter through the other models,
    and (unless `with_declared`) not among the primary cases: the stacking checks are the shared Block stack's,
    which "llama" covers.
    """
    for model_name in language_model_names():
        declared = getattr(MODELS.get(model_name), "CONFORMANCE_CONFIGS", None)
        if declared is not None:
            for i, overrides in enumerate(declared if with_declared else ()):
                cfg = ModelConfig(name=model_name, **{**TINY, **overrides})
                yield pytest.param(cfg, id=f"{model_name}-{cfg.mixer}-declared{i}")
            continue
        for mixer_name in MIXERS.names():
            for i, options in enumerate(conformance_options(MIXERS.get(mixer_name))):
                if primary_only and i:
                    break
                cfg = ModelConfig(name=model_name, mixer=mixer_name, mixer_options=options, **TINY)
                yield pytest.param(cfg, id=f"{model_name}-{mixer_name}-opts{i}")


class Case:
    """A built model, its split parameters and jitted pure functions of (params, inputs)."""

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg
        self.model = build_model(cfg, rngs=nnx.Rngs(0))
        self.graphdef, self.params = nnx.split(self.model, nnx.Param)
        self.forward = jax.jit(self._forward)
        self.decode = jax.jit(self._decode)
        # (graphdef, params, tokens) -> (loss, grads); graphdef is static, so each layout compiles once.
        self.loss_and_grad = jax.jit(jax.value_and_grad(_loss, argnums=1), static_argnums=0)

    def _forward(self, params, tokens, segment_ids=None, positions=None):
        return nnx.merge(self.graphdef, params)(tokens, segment_ids=segment_ids, positions=positions)

    def _decode(self, params, tokens, cache):
        return nnx.merge(self.graphdef, params).decode(tokens, cache)


# One Case per config for the whole module: a mixer's first variant is both a `case` and its `primary_case`,
# and sharing the object shares its compiled programs (the scanned forward and gradient).
_BUILT: dict[ModelConfig, Case] = {}


def _built(cfg: ModelConfig) -> Case:
    if cfg not in _BUILT:
        _BUILT[cfg] = Case(cfg)
    return _BUILT[cfg]


@pytest.fixture(scope="module", autouse=True)
def _forget_built_cases():
    yield
    _BUILT.clear()


@pytest.fixture(scope="module", params=list(_cases()))
def case(request) -> Case:
    return _built(request.param)


# Layer stacking (scan vs unrolled, remat, program size) does not depend on a mixer's options, so these
# compile-heavy checks run once per mixer, on its first variant.
@pytest.fixture(scope="module", params=list(_cases(primary_only=True, with_declared=False)))
def primary_case(request) -> Case:
    return _built(request.param)


# The exact-zero causality check differentiates the whole model for every position (a Jacobian): it runs on each
# mixer's first variant and each declared model; the other option variants are checked by perturbing the future.
@pytest.fixture(scope="module", params=list(_cases(primary_only=True)))
def jacobian_case(request) -> Case:
    return _built(request.param)


def _tokens(seed: int, shape=(BATCH, LENGTH)) -> jax.Array:
    return jax.random.randint(jax.random.key(seed), shape, 0, VOCAB, dtype=jnp.int32)


def _close(actual, expected, dtype="float32"):
    chex.assert_trees_all_close(actual, expected, **TOLERANCES[dtype])


def _abstract_split(cfg: ModelConfig):
    """(graphdef, abstract params) of the model cfg describes, without initializing anything."""
    return nnx.split(nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0))), nnx.Param)


def _loss(graphdef, params, tokens):
    logits = nnx.merge(graphdef, params)(tokens)
    return jnp.mean(
        jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, tokens[..., None], -1)[..., 0]
    )


def test_shapes_dtype_and_finite(case):
    logits = case.forward(case.params, _tokens(0))
    chex.assert_shape(logits, (BATCH, LENGTH, VOCAB))
    chex.assert_type(logits, jnp.float32)
    chex.assert_tree_all_finite(logits)


def test_only_params_and_split_merge_under_jit_and_grad(case):
    assert not jax.tree.leaves(nnx.state(case.model, nnx.Not(nnx.Param)))
    tokens = _tokens(1)
    loss, grads = case.loss_and_grad(case.graphdef, case.params, tokens)
    logits = np.asarray(case.forward(case.params, tokens), np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, np.asarray(tokens)[..., None], -1).mean()
    _close(loss, jnp.float32(expected))
    chex.assert_trees_all_equal_shapes_and_dtypes(grads, case.params)
    chex.assert_tree_all_finite(grads)
    assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads)), "a parameter gets no gradient"


def test_causality_by_gradients(jacobian_case):
    """d logits[t] / d input-embedding[s] is exactly zero for s > t, and nonzero for s = t."""
    case = jacobian_case
    x = case.model.embed(_tokens(2))
    readout = jax.random.normal(jax.random.key(3), (VOCAB,))

    def per_position(x):  # [B, T]: a random projection of each position's logits
        logits = nnx.merge(case.graphdef, case.params).forward_embeddings(x)
        return logits @ readout

    jac = jax.jit(jax.jacrev(per_position))(x)  # [B, T, B, T, D]
    cross_row = jac * (1.0 - jnp.eye(BATCH))[:, None, :, None, None]
    assert float(jnp.abs(cross_row).max()) <= CAUSAL_LEAK_TOLERANCE  # batch rows never interact
    jac = jnp.einsum("btbsd->btsd", jac)  # keep b_out == b_in
    influence = np.asarray(jnp.abs(jac).max(axis=-1))  # [B, T(out), T(in)]
    future = np.triu(np.ones((LENGTH, LENGTH), bool), k=1)
    assert influence[:, future].max() <= _causal_leak_tolerance(case.cfg)
    assert influence[:, np.eye(LENGTH, dtype=bool)].min() > 0


def test_causality_by_perturbing_future_tokens(case):
    tokens = _tokens(4)
    cut = 5
    perturbed = tokens.at[:, cut:].set((tokens[:, cut:] + 1) % VOCAB)
    original, changed = case.forward(case.params, tokens), case.forward(case.params, perturbed)
    _close(changed[:, :cut], original[:, :cut])
    assert float(jnp.abs(changed[:, cut:] - original[:, cut:]).max()) > 1e-3


def _decode_in_chunks(case, tokens, chunks):
    cache = case.model.init_cache(tokens.shape[0])
    outputs, start = [], 0
    for size in chunks:
        logits, cache = case.decode(case.params, tokens[:, start : start + size], cache)
        outputs.append(logits)
        start += size
    assert int(cache.index) == tokens.shape[1]
    return jnp.concatenate(outputs, axis=1)


def test_decode_token_by_token_equals_forward(case):
    tokens = _tokens(5)
    _close(_decode_in_chunks(case, tokens, [1] * LENGTH), case.forward(case.params, tokens))


def test_chunked_prefill_then_steps_equals_forward(case):
    tokens = _tokens(6)
    _close(_decode_in_chunks(case, tokens, [5, 4, 1, 1, 1]), case.forward(case.params, tokens))


def test_packed_equals_separate_padded(case):
    """Two sequences packed into one row give the logits of each run alone (padded with segment 0)."""
    lengths = (5, LENGTH - 5)
    first, second = _tokens(7, (1, lengths[0])), _tokens(8, (1, lengths[1]))
    packed = jnp.concatenate([first, second], axis=1)
    segments = jnp.asarray([[1] * lengths[0] + [2] * lengths[1]], jnp.int32)
    packed_logits = case.forward(case.params, packed, segments)  # positions derived from segments

    positions = jnp.asarray([list(range(lengths[0])) + list(range(lengths[1]))], jnp.int32)
    _close(case.forward(case.params, packed, segments, positions), packed_logits)
    for tokens, offset in ((first, 0), (second, lengths[0])):
        n = tokens.shape[1]
        padded = jnp.pad(tokens, ((0, 0), (0, LENGTH - n)))
        pad_segments = jnp.asarray([[1] * n + [0] * (LENGTH - n)], jnp.int32)
        alone = case.forward(case.params, padded, pad_segments)
        _close(packed_logits[:, offset : offset + n], alone[:, :n])


def test_param_count_independent_of_sequence_length(case):
    def abstract_count(max_seq_len):
        cfg = dataclasses.replace(case.cfg, max_seq_len=max_seq_len)
        return count_params(nnx.eval_shape(lambda: build_model(cfg, rngs=nnx.Rngs(0))))

    assert abstract_count(16) == abstract_count(4096) == count_params(case.model)


def test_scan_equals_unrolled_and_remat(primary_case):
    """Identical parameters in the scanned, unrolled and rematerialized layouts: same logits and grads."""
    case = primary_case
    tokens = _tokens(1)
    unrolled = convert_layer_layout(case.model, scan_layers=False)
    assert isinstance(unrolled.layers, nnx.List) and len(unrolled.layers) == case.cfg.num_layers
    graphdef_u, params_u = nnx.split(unrolled, nnx.Param)
    forward_u = jax.jit(lambda p, t: nnx.merge(graphdef_u, p)(t))
    _close(forward_u(params_u, tokens), case.forward(case.params, tokens))

    def grad(graphdef, params, tokens):
        return case.loss_and_grad(graphdef, params, tokens)[1]

    expected = nnx.to_pure_dict(grad(case.graphdef, case.params, tokens))
    _close(stack_layers(nnx.to_pure_dict(grad(graphdef_u, params_u, tokens))), expected)

    # Remat recomputes the same program, so one compiled comparison (scanned) checks its values; the unrolled
    # layout's remat only has to trace (a mixer whose backward cannot be rematerialized fails there).
    remat_scanned = _abstract_split(dataclasses.replace(case.cfg, remat=True))[0]
    _close(nnx.to_pure_dict(grad(remat_scanned, case.params, tokens)), expected)
    remat_unrolled = _abstract_split(dataclasses.replace(case.cfg, remat=True, scan_layers=False))[0]
    case.loss_and_grad.lower(remat_unrolled, params_u, tokens)

    round_trip = convert_layer_layout(unrolled, scan_layers=True)
    chex.assert_trees_all_equal(
        nnx.to_pure_dict(nnx.state(round_trip, nnx.Param)), nnx.to_pure_dict(case.params)
    )


def test_scanned_program_size_independent_of_depth(primary_case):
    """Scanned layers lower to one loop body: the program's op count does not grow with num_layers
    (which is what keeps compile time flat), while the unrolled program's does."""
    case = primary_case

    def dot_count(**overrides):
        cfg = dataclasses.replace(case.cfg, **overrides)
        graphdef, params = _abstract_split(cfg)
        tokens = jax.ShapeDtypeStruct((BATCH, LENGTH), jnp.int32)
        lowered = jax.jit(jax.grad(_loss, argnums=1), static_argnums=0).lower(graphdef, params, tokens)
        return lowered.as_text().count("dot_general")

    # Depths 2 and 3 show the invariant as well as any pair would; each extra unrolled layer is one more layer's
    # forward and backward to trace for every mixer.
    assert dot_count(num_layers=2) == dot_count(num_layers=3)
    assert dot_count(num_layers=3, scan_layers=False) > dot_count(num_layers=2, scan_layers=False)


@pytest.mark.parametrize(
    "overrides",
    [
        {"norm_placement": "post"},
        {"norm_placement": "sandwich"},
        {"norm_placement": "none"},
        {"tie_embeddings": False, "scan_layers": False},
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
@pytest.mark.parametrize("mixer", VARIANT_MIXERS)
def test_variants_run(mixer, overrides):
    """The backbone's norm placements and untied, unrolled layers build and run. They wrap the mixer without
    looking inside it, so one softmax and one recurrent mixer cover them (every mixer runs unrolled in
    test_scan_equals_unrolled_and_remat)."""
    case = _built(ModelConfig(name="llama", mixer=mixer, **TINY))
    cfg = dataclasses.replace(case.cfg, **overrides)
    model = build_model(cfg, rngs=nnx.Rngs(1))
    tokens = _tokens(11)
    logits = jax.jit(lambda m, t: m(t))(model, tokens)
    chex.assert_shape(logits, (BATCH, LENGTH, VOCAB))
    chex.assert_tree_all_finite(logits)
    assert count_params(model) != count_params(case.model)  # the variant changed the architecture


def test_bfloat16_compute_matches_float32(case):
    cfg = dataclasses.replace(case.cfg, compute_dtype="bfloat16")
    graphdef = _abstract_split(cfg)[0]
    tokens = _tokens(12)
    forward = jax.jit(lambda p, t: nnx.merge(graphdef, p)(t))
    logits = forward(case.params, tokens)
    chex.assert_type(logits, jnp.float32)
    _close(logits, case.forward(case.params, tokens), "bfloat16")
    model = nnx.merge(graphdef, case.params)
    decode = jax.jit(lambda p, t, c: nnx.merge(graphdef, p).decode(t, c))
    cache = model.init_cache(BATCH)
    first, cache = decode(case.params, tokens[:, : LENGTH // 2], cache)
    second, _ = decode(case.params, tokens[:, LENGTH // 2 :], cache)
    _close(jnp.concatenate([first, second], axis=1), logits, "bfloat16")


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: jnp.zeros((BATCH, LENGTH), jnp.float32), r"tokens must be an integer array.*float32"),
        (lambda: jnp.zeros((LENGTH,), jnp.int32),
         r"tokens must be an integer array of shape \[B, T\] = \(\*, \*\), got int32 \(12,\)"),
    ],
    ids=["float-tokens", "rank-1-tokens"],
)
def test_bad_tokens_raise(case, bad, match):
    with pytest.raises(ValueError, match=match):
        case.model(bad())
    with pytest.raises(ValueError, match=match):
        case.model.decode(bad(), case.model.init_cache(BATCH))


def test_bad_side_inputs_and_decode_overflow_raise(case):
    tokens = _tokens(13)
    with pytest.raises(
        ValueError, match=r"segment_ids must be an integer array of shape .*\(2, 12\).*\(2, 11\)"
    ):
        case.model(tokens, segment_ids=jnp.ones((BATCH, LENGTH - 1), jnp.int32))
    with pytest.raises(ValueError, match=r"positions must be an integer array.*float32"):
        case.model(tokens, positions=jnp.zeros((BATCH, LENGTH), jnp.float32))
    small = case.model.init_cache(BATCH, max_len=8)
    with pytest.raises(ValueError, match=r"T' <= max_len = 8.*got shape \(2, 12\)"):
        case.model.decode(tokens, small)
    _, filled = case.model.decode(tokens[:, :6], small)
    with pytest.raises(ValueError, match=r"do not fit: the cache holds 6 of max_len = 8"):
        case.model.decode(tokens[:, :3], filled)
    with pytest.raises(ValueError, match=r"B = 2.*got shape \(3, 1\)"):
        case.model.decode(_tokens(14, (3, 1)), case.model.init_cache(BATCH))
