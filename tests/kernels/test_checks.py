"""Kernel inputs: every op (except selective_scan, tested in its own file) rejects non-finite gates, decays,
`beta`, `eta` and `scale`, empty sequences, non-integer chunk sizes and non-array inputs with a ValueError
naming the op, the argument, what was received and what was expected (eager, cheap: T = 8, no compile);
and `kernels.checked` keeps the value checks under `jit` and `grad`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo import kernels

B, T, H, D = 1, 8, 1, 4
# XLA's cheap pipeline: the ops run at T = 8 and compile far longer than they run; the one bit-exact check
# compares two programs compiled here under the same setting.
pytestmark = pytest.mark.usefixtures("fast_compile")


def _f32(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _arrays() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    n = lambda *s: _f32(0.5 * rng.standard_normal(s))
    return {"q": n(B, T, H, D), "k": n(B, T, H, D), "v": n(B, T, H, D), "gate": _f32(-rng.uniform(0, 1, (B, T, H))),
            "vgate": _f32(-rng.uniform(0, 1, (B, T, H, D))), "unit": _f32(rng.uniform(0, 1, (B, T, H))),
            "u": n(B, T, D), "h": n(T, D)}


def _valid(op: str) -> dict[str, Any]:
    """Valid keyword inputs of op `op` (q, k, v [1, 8, 1, 4]; gates [1, 8, 1])."""
    x = _arrays()
    qkv = {"q": x["q"], "k": x["k"], "v": x["v"]}
    return {
        "forgetting_attention": {**qkv, "log_fgate": x["gate"]},
        "value_forget_attention": {**qkv, "log_vgate": x["vgate"], "log_fgate": x["gate"]},
        "gated_delta_rule": {**qkv, "beta": x["unit"], "g": x["gate"]},
        "momentum_delta_rule": {**qkv, "p": x["k"], "g": x["gate"], "log_mu": x["gate"], "beta": x["unit"],
                                "eta": x["unit"]},
        "ssd": {"x": x["v"], "a": x["gate"], "b": x["k"], "c": x["q"]},
        "causal_long_conv": {"u": x["u"], "h": x["h"]},
    }[op]


OPS: dict[str, Callable[..., Any]] = {name: getattr(kernels, name) for name in (
    "forgetting_attention", "value_forget_attention", "gated_delta_rule", "momentum_delta_rule", "ssd",
    "causal_long_conv")}
# The gate / decay arguments whose values each op checks.
GATES = {"forgetting_attention": ("log_fgate",), "value_forget_attention": ("log_vgate", "log_fgate"),
         "gated_delta_rule": ("beta", "g"), "momentum_delta_rule": ("g", "log_mu", "beta", "eta"), "ssd": ("a",)}
WITH_SCALE = ("forgetting_attention", "value_forget_attention", "gated_delta_rule", "momentum_delta_rule")
WITH_CHUNK = ("gated_delta_rule", "momentum_delta_rule", "ssd")
FIRST = {"ssd": "x", "causal_long_conv": "u"}  # the [B, T, ...] argument whose length an error names


def _raises(op: str, match: str, **change: Any) -> None:
    with pytest.raises(ValueError, match=match) as info:
        OPS[op](**{**_valid(op), **change})
    assert str(info.value).startswith(f"{op}:"), f"the error does not name the op: {info.value}"


@pytest.mark.parametrize("op", list(OPS))
def test_valid_inputs_run(op: str) -> None:
    out = OPS[op](**_valid(op))
    assert all(np.all(np.isfinite(np.asarray(o))) for o in jax.tree.leaves(out))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("op, gate", [(op, g) for op, gates in GATES.items() for g in gates])
def test_non_finite_gate_raises(op: str, gate: str, bad: float) -> None:
    valid = _valid(op)[gate]
    value = valid.at[(0, 3) + (0,) * (valid.ndim - 2)].set(bad)
    _raises(op, f"`{gate}` must be finite.*got 1 bad value", **{gate: value})


@pytest.mark.parametrize("scale, received", [(float("nan"), "nan"), ("0.5", "str"), (0.0, "0.0"), (True, "bool"),
                                             (jnp.float32(np.inf), "positive finite")])
@pytest.mark.parametrize("op", WITH_SCALE)
def test_bad_scale_raises(op: str, scale: Any, received: str) -> None:
    _raises(op, f"`scale`.*{received}", scale=scale)


@pytest.mark.parametrize("chunk", [64.0, "64", True, np.float32(64)])
@pytest.mark.parametrize("op", WITH_CHUNK)
def test_non_integer_chunk_size_raises(op: str, chunk: Any) -> None:
    _raises(op, r"`chunk_size` is .*expected one of \(16, 32, 64, 128\)", chunk_size=chunk)


@pytest.mark.parametrize("op", list(OPS))
def test_empty_sequence_raises(op: str) -> None:
    empty = {n: x[:, :0] if x.ndim >= 3 else x[:0] for n, x in _valid(op).items()}
    name = FIRST.get(op, "q")
    with pytest.raises(ValueError, match=rf"^{op}: `{name}` has shape \(1, 0, .*T ≥ 1|T >= 1"):
        OPS[op](**empty)


@pytest.mark.parametrize("op", list(OPS))
def test_python_list_and_none_raise(op: str) -> None:
    name = FIRST.get(op, "q")
    valid = _valid(op)
    _raises(op, rf"`{name}` is list \[\[\[.*expected a jax.Array or numpy array", **{name: valid[name].tolist()})
    _raises(op, rf"`{name}` is NoneType None, expected a jax.Array or numpy array", **{name: None})


def test_checked_raises_under_jit_naming_op_and_argument() -> None:
    x = _valid("gated_delta_rule")
    run = jax.jit(kernels.checked(kernels.gated_delta_rule))
    o, _ = run(**x)
    np.testing.assert_array_equal(o, kernels.gated_delta_rule(**x)[0])
    with pytest.raises(Exception, match=r"gated_delta_rule: `beta` must be finite and in \[0, 2\]; got 1 bad"):
        jax.block_until_ready(run(**{**x, "beta": x["beta"].at[0, 2].set(jnp.nan)}))
    # The unchecked op under jit skips the value checks (documented): no error, garbage in, garbage out.
    jax.block_until_ready(jax.jit(kernels.gated_delta_rule)(**{**x, "beta": x["beta"].at[0, 2].set(jnp.nan)}))


def test_checked_under_grad_and_for_every_gate_kind() -> None:
    x = _valid("ssd")
    loss = lambda a: kernels.checked(kernels.ssd)(x["x"], a, x["b"], x["c"])[0].sum()
    want = jax.grad(lambda a: kernels.ssd(x["x"], a, x["b"], x["c"])[0].sum())(x["a"])
    # One jitted gradient for the valid and the bad decay: the check runs in the same compiled program.
    checked_grad = jax.jit(jax.grad(loss))
    np.testing.assert_allclose(checked_grad(x["a"]), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(Exception, match=r"ssd: `a` must be finite and <= 0"):
        jax.block_until_ready(checked_grad(x["a"].at[0, 5].set(0.5)))
    f = _valid("forgetting_attention")
    fox = jax.jit(kernels.checked(lambda log_fgate: kernels.forgetting_attention(f["q"], f["k"], f["v"], log_fgate,
                                                                                  scale=0.5)))
    with pytest.raises(Exception, match=r"forgetting_attention: `log_fgate` must be finite and ≤ 0"):
        jax.block_until_ready(fox(f["log_fgate"].at[0, 1].set(jnp.inf)))


def test_checked_eager_call_raises_the_api_value_error() -> None:
    x = _valid("momentum_delta_rule")
    with pytest.raises(ValueError, match=r"^momentum_delta_rule: `eta` must be finite and >= 0"):
        kernels.checked(kernels.momentum_delta_rule)(**{**x, "eta": x["eta"].at[0, 0].set(np.nan)})
