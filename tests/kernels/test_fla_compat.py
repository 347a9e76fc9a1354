"""icml26zoo.kernels.fla: flash-linear-attention's signatures equal the zoo op each converts to (outputs, final
states, cu_seqlens with per-sequence states, one-token decoding through the step ops), bad input names the
argument, and the zoo ops' TypeError for an fla-style call names the fla entry point.

Every call runs the "reference" implementation in float32 at a few shared shapes, so each wrapper and the op
it is compared with hit the same compiled program.
"""

from __future__ import annotations

import functools
import inspect

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.kernels import fla, forgetting_attention, gated_delta_rule, gated_delta_rule_step, ssd

REF = "reference"
B, T, H, K = 2, 13, 2, 8
CU = np.array([0, 6, 9, 13])  # three sequences of lengths 6, 3, 4 packed in one row of T = 13
TIGHT = {"rtol": 1e-6, "atol": 1e-6}


def _close(actual: jax.Array, expected: jax.Array) -> None:
    chex.assert_equal_shape([actual, expected])
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), **TIGHT)


@functools.cache
def _inputs(batch: int, length: int) -> dict[str, jax.Array]:
    """q, k, v [B, T, H, K]; log-decays g [B, T, H], gk [B, T, H, K] in [-0.7, -0.1]; beta in (0, 1); a state
    h0 [B, H, K, V] and three per-sequence states h3 [3, H, K, V] (fla's [K, V] layout)."""
    keys = jax.random.split(jax.random.key(0), 8)
    normal = lambda i, shape: jax.random.normal(keys[i], shape, jnp.float32)
    decay = lambda i, shape: jax.random.uniform(keys[i], shape, jnp.float32, -0.7, -0.1)
    return {"q": normal(0, (batch, length, H, K)), "k": normal(1, (batch, length, H, K)) / np.sqrt(K),
            "v": normal(2, (batch, length, H, K)), "g": decay(3, (batch, length, H)),
            "gk": decay(4, (batch, length, H, K)), "beta": jax.nn.sigmoid(normal(5, (batch, length, H))),
            "h0": normal(6, (batch, H, K, K)), "h3": normal(7, (3, H, K, K))}


def _l2(x: jax.Array) -> jax.Array:
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


# --- delta-rule family -------------------------------------------------------------------------------------

DELTA_CASES = {
    # name: (fla call on the inputs, the zoo's gate for it)
    "chunk_gated_delta_rule": (lambda d, **kw: fla.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"],
                                                                         d["beta"], **kw), "g"),
    "fused_recurrent_gated_delta_rule": (lambda d, **kw: fla.fused_recurrent_gated_delta_rule(
        d["q"], d["k"], d["v"], d["g"], None, None, d["beta"], **kw), "g"),
    "fused_recurrent_gated_delta_rule g+gk": (lambda d, **kw: fla.fused_recurrent_gated_delta_rule(
        d["q"], d["k"], d["v"], d["g"], d["gk"], beta=d["beta"], **kw), "g+gk"),
    "chunk_delta_rule": (lambda d, **kw: fla.chunk_delta_rule(d["q"], d["k"], d["v"], d["beta"], **kw), None),
    "fused_recurrent_delta_rule": (lambda d, **kw: fla.fused_recurrent_delta_rule(d["q"], d["k"], d["v"],
                                                                                 d["beta"], **kw), None),
    "chunk_kda": (lambda d, **kw: fla.chunk_kda(d["q"], d["k"], d["v"], d["gk"], d["beta"], **kw), "gk"),
    "fused_recurrent_kda": (lambda d, **kw: fla.fused_recurrent_kda(d["q"], d["k"], d["v"], d["gk"], d["beta"],
                                                                    **kw), "gk"),
}


def _zoo_gate(d: dict[str, jax.Array], gate: str | None) -> jax.Array | None:
    return {"g": d.get("g"), "gk": d.get("gk"), "g+gk": d["g"][..., None] + d["gk"], None: None}[gate]


@pytest.mark.parametrize("name", DELTA_CASES)
def test_delta_family_equals_gated_delta_rule(name):
    call, gate = DELTA_CASES[name]
    d = _inputs(B, T)
    o, final = call(d, scale=0.5, initial_state=d["h0"], output_final_state=True, implementation=REF)
    want_o, want_final = gated_delta_rule(d["q"], d["k"], d["v"], beta=d["beta"], g=_zoo_gate(d, gate), scale=0.5,
                                          initial_state=d["h0"], implementation=REF)
    chex.assert_shape(o, (B, T, H, K))
    chex.assert_type(final, jnp.float32)
    _close(o, want_o)
    _close(final, want_final)
    o_only, none = call(d, scale=0.5, initial_state=d["h0"], implementation=REF)
    assert none is None
    _close(o_only, want_o)


def test_qk_l2norm_in_kernel_normalizes_q_and_k_first():
    d = _inputs(B, T)
    o, _ = fla.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], use_qk_l2norm_in_kernel=True,
                                      implementation=REF)
    want, _ = gated_delta_rule(_l2(d["q"]), _l2(d["k"]), d["v"], beta=d["beta"], g=d["g"], implementation=REF)
    np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-5)  # fla's eps 1e-6 under the root


def test_more_value_heads_than_qk_heads_repeats_q_and_k_per_group():
    """fla's GVA: v [B, T, HV, V] with HV = 2 H; value head j reads q/k head j // 2."""
    d = _inputs(B, T)
    q1, k1 = d["q"][:, :, :1], d["k"][:, :, :1]
    o, _ = fla.chunk_gated_delta_rule(q1, k1, d["v"], d["g"], d["beta"], implementation=REF)
    want, _ = gated_delta_rule(jnp.repeat(q1, H, axis=2), jnp.repeat(k1, H, axis=2), d["v"], beta=d["beta"],
                               g=d["g"], implementation=REF)
    _close(o, want)


_STEP = jax.jit(gated_delta_rule_step)  # one compile for every token of every sequence


def _per_sequence(d: dict[str, jax.Array], states: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Each packed sequence run alone from its own state, token by token with the zoo's step op: outputs
    [1, T, H, V] and final states [N, H, K, V]."""
    outs, finals = [], []
    for n, (start, end) in enumerate(zip(CU[:-1], CU[1:], strict=True)):
        state = states[n:n + 1]
        for t in range(start, end):
            o, state = _STEP(d["q"][:, t], d["k"][:, t], d["v"][:, t], beta=d["beta"][:, t], g=d["g"][:, t],
                             state=state)
            outs.append(o)
        finals.append(state)
    return jnp.stack(outs, axis=1), jnp.concatenate(finals)


def test_cu_seqlens_gives_each_sequence_its_own_initial_and_final_state():
    d = _inputs(1, T)
    outs, finals = _per_sequence(d, d["h3"])
    o, final = fla.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], initial_state=d["h3"],
                                          output_final_state=True, cu_seqlens=CU, implementation=REF)
    chex.assert_shape(final, (3, H, K, K))
    _close(o, outs)
    _close(final, finals)


def test_cu_seqlens_without_states_packs_by_segment_ids():
    d = _inputs(1, T)
    outs, _ = _per_sequence(d, jnp.zeros_like(d["h3"]))
    o, none = fla.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], cu_seqlens=list(CU),
                                         implementation=REF)
    assert none is None
    _close(o, outs)


def test_fused_recurrent_one_token_per_sequence_uses_the_step_op():
    """Decoding: a [B, 1] batch, or N one-token sequences packed by cu_seqlens, equals the op on [N, 1] rows."""
    d = _inputs(1, 3)
    rows = {name: jnp.swapaxes(d[name], 0, 1) for name in ("q", "k", "v", "g", "beta")}  # [3, 1, ...]
    want_o, want_final = gated_delta_rule(rows["q"], rows["k"], rows["v"], beta=rows["beta"], g=rows["g"],
                                          initial_state=d["h3"], implementation=REF)
    packed = fla.fused_recurrent_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], beta=d["beta"],
                                                  initial_state=d["h3"], output_final_state=True,
                                                  cu_seqlens=np.arange(4))
    batched = fla.fused_recurrent_gated_delta_rule(rows["q"], rows["k"], rows["v"], rows["g"], beta=rows["beta"],
                                                   initial_state=d["h3"], output_final_state=True)
    for (o, final), layout in ((packed, d["q"].shape), (batched, rows["q"].shape)):
        chex.assert_shape(o, layout)
        _close(o.reshape(want_o.shape), want_o)
        _close(final, want_final)


# --- gated linear attention (ssd) and forgetting attention -------------------------------------------------


def _ssd_as_gla(d: dict[str, jax.Array], a: jax.Array, state: jax.Array, scale: float) -> tuple[jax.Array, ...]:
    """ssd with x = v, b = k, c = scale q and the state in ssd's [V, K] layout, returned in fla's [K, V]."""
    y, final = ssd(d["v"], a, d["k"], d["q"] * scale, initial_state=jnp.swapaxes(state, -1, -2),
                   implementation=REF)
    return y, jnp.swapaxes(final, -1, -2)


GLA_CASES = {
    "chunk_simple_gla": lambda d, **kw: fla.chunk_simple_gla(d["q"], d["k"], d["v"], d["g"], **kw),
    "fused_recurrent_simple_gla": lambda d, **kw: fla.fused_recurrent_simple_gla(d["q"], d["k"], d["v"], d["g"],
                                                                                 **kw),
    "chunk_gla": lambda d, **kw: fla.chunk_gla(d["q"], d["k"], d["v"], d["gk"], **kw),
    "fused_recurrent_gla": lambda d, **kw: fla.fused_recurrent_gla(d["q"], d["k"], d["v"], d["gk"], **kw),
}


@pytest.mark.parametrize("name", GLA_CASES)
def test_gla_family_equals_ssd(name):
    d = _inputs(B, T)
    o, final = GLA_CASES[name](d, initial_state=d["h0"], output_final_state=True, implementation=REF)
    want_o, want_final = _ssd_as_gla(d, d["gk"] if "simple" not in name else d["g"], d["h0"], K ** -0.5)
    _close(o, want_o)
    _close(final, want_final)


def test_simple_gla_g_gamma_is_a_constant_decay_per_head():
    d = _inputs(B, T)
    gamma = jnp.array([-0.1, -0.5], jnp.float32)
    o, none = fla.chunk_simple_gla(d["q"], d["k"], d["v"], g_gamma=gamma, scale=0.25, implementation=REF)
    want, _ = _ssd_as_gla(d, jnp.broadcast_to(gamma, (B, T, H)), jnp.zeros_like(d["h0"]), 0.25)
    assert none is None
    _close(o, want)


def test_fused_recurrent_simple_gla_one_token_per_sequence_uses_the_step_op():
    d = _inputs(1, 3)
    rows = {name: jnp.swapaxes(d[name], 0, 1) for name in ("q", "k", "v", "g")}
    want_o, want_final = _ssd_as_gla(rows, rows["g"], d["h3"], K ** -0.5)
    o, final = fla.fused_recurrent_simple_gla(d["q"], d["k"], d["v"], d["g"], initial_state=d["h3"],
                                              output_final_state=True, cu_seqlens=np.arange(4))
    _close(o[0], want_o[:, 0])
    _close(final, want_final)


def test_parallel_forgetting_attn_equals_forgetting_attention_with_segment_ids():
    d = _inputs(1, T)
    o = fla.parallel_forgetting_attn(d["q"], d["k"], d["v"], d["g"], 0.3, cu_seqlens=CU, implementation=REF)
    segment_ids = jnp.asarray([[0] * 6 + [1] * 3 + [2] * 4], jnp.int32)
    want = forgetting_attention(d["q"], d["k"], d["v"], d["g"], scale=0.3, segment_ids=segment_ids,
                                implementation=REF)
    chex.assert_type(o, jnp.float32)
    _close(o, want)


# --- bad input ---------------------------------------------------------------------------------------------

BAD = {
    "cu_seqlens not ending at T": (dict(cu_seqlens=np.array([0, 6, 12])), "cu_seqlens"),
    "cu_seqlens not starting at 0": (dict(cu_seqlens=np.array([1, 6, 13])), "cu_seqlens"),
    "cu_seqlens with an empty sequence": (dict(cu_seqlens=np.array([0, 6, 6, 13])), "cu_seqlens"),
    "cu_seqlens of floats": (dict(cu_seqlens=np.array([0.0, 6.0, 13.0])), "cu_seqlens"),
    "cu_seqlens 2-D": (dict(cu_seqlens=np.array([[0, 13]])), "cu_seqlens"),
    "one state for three sequences": (dict(cu_seqlens=CU, initial_state=jnp.zeros((1, H, K, K))), "initial_state"),
    "flag not a bool": (dict(output_final_state="yes"), "output_final_state"),
    "l2norm flag not a bool": (dict(use_qk_l2norm_in_kernel=None), "use_qk_l2norm_in_kernel"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_arguments_raise_value_error_naming_them(case):
    kwargs, name = BAD[case]
    d = _inputs(1, T)
    with pytest.raises(ValueError, match=f"chunk_gated_delta_rule: `{name}`"):
        fla.chunk_gated_delta_rule(d["q"], d["k"], d["v"], d["g"], d["beta"], **kwargs)


def test_cu_seqlens_needs_a_batch_of_one_and_a_concrete_value():
    d = _inputs(B, T)
    with pytest.raises(ValueError, match="`cu_seqlens` needs a batch of one row.*batch size 2"):
        fla.chunk_delta_rule(d["q"], d["k"], d["v"], d["beta"], cu_seqlens=CU)
    traced = jax.jit(lambda cu: fla.chunk_delta_rule(d["q"][:1], d["k"][:1], d["v"][:1], d["beta"][:1],
                                                     cu_seqlens=cu))
    with pytest.raises(ValueError, match="`cu_seqlens` is traced"):
        traced(jnp.asarray(CU))


def test_unsupported_fla_options_and_shapes_are_named():
    d = _inputs(1, T)
    with pytest.raises(ValueError, match="parallel_forgetting_attn: `window_size` is not supported"):
        fla.parallel_forgetting_attn(d["q"], d["k"], d["v"], d["g"], window_size=64)
    with pytest.raises(ValueError, match="fused_recurrent_gla: `gv` is not supported"):
        fla.fused_recurrent_gla(d["q"], d["k"], d["v"], d["gk"], d["v"])
    with pytest.raises(ValueError, match="chunk_simple_gla: `g` and `g_gamma` are both given"):
        fla.chunk_simple_gla(d["q"], d["k"], d["v"], d["g"], jnp.zeros(H))
    with pytest.raises(ValueError, match=r"chunk_gla: `g` has shape \(1, 13, 2\), expected \(1, 13, 2, 8\)"):
        fla.chunk_gla(d["q"], d["k"], d["v"], d["g"])
    with pytest.raises(ValueError, match=r"chunk_kda: `beta` has shape \(1, 12, 2\), expected \[B, T, \.\.\.\]"):
        fla.chunk_kda(d["q"], d["k"], d["v"], d["gk"], d["beta"][:, 1:])


# --- the zoo ops' TypeError for an fla-style call ----------------------------------------------------------


def test_zoo_ops_name_the_fla_entry_point_for_fla_style_calls():
    d = _inputs(1, T)
    q, k, v, g, beta = (d[name] for name in ("q", "k", "v", "g", "beta"))
    calls = {
        "chunk_gated_delta_rule": [lambda: gated_delta_rule(q, k, v, g, beta),
                                   lambda: gated_delta_rule(q, k, v, beta=beta, output_final_state=True),
                                   lambda: gated_delta_rule(q, k, v, beta=beta, cu_seqlens=CU),
                                   lambda: gated_delta_rule(q, k, v, beta=beta, use_qk_l2norm_in_kernel=True)],
        "fused_recurrent_gated_delta_rule": [lambda: gated_delta_rule_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0],
                                                                           beta[:, 0])],
        "parallel_forgetting_attn": [lambda: forgetting_attention(q, k, v, g, cu_seqlens=CU)],
        "chunk_simple_gla": [lambda: ssd(v, g, k, q, output_final_state=True)],
    }
    for entry_point, attempts in calls.items():
        assert hasattr(fla, entry_point)
        for attempt in attempts:
            with pytest.raises(TypeError, match=rf"positionally and the rest by keyword; .*kernels\.fla\."
                                                rf"{entry_point} \(docs/fla\.md\)"):
                attempt()
    with pytest.raises(TypeError, match=r"gated_delta_rule\(\): takes 3 positional arguments but 5 were given"):
        gated_delta_rule(q, k, v, g, beta)


def test_the_hint_keeps_the_ops_introspectable():
    assert gated_delta_rule.__name__ == "gated_delta_rule"
    assert "Gated delta rule" in gated_delta_rule.__doc__
    assert list(inspect.signature(gated_delta_rule).parameters)[:4] == ["q", "k", "v", "beta"]
    log_fgate = inspect.signature(forgetting_attention).parameters["log_fgate"]
    assert log_fgate.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
