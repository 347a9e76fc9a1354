"""flash-linear-attention's call signatures over the zoo's ops (docs/fla.md).

Each function takes the arguments of the fla function of the same name (fla's `main` branch, time-first
`[B, T, H, K]` layout) and calls one zoo op; none holds any recurrence maths of its own. The conversions:

- positional gates (`g`, `beta`) become the op's keywords; `scale=None` means `K ** -0.5` as in both;
- `output_final_state=False` returns `(o, None)`, True returns `(o, final_state)` with `final_state`
  float32 `[N, H, K, V]`;
- `use_qk_l2norm_in_kernel=True` L2-normalizes q and k over K (eps 1e-6 under the root, in float32) before the
  call;
- `cu_seqlens` `[N + 1]` (batch 1, the N sequences concatenated along T) becomes `segment_ids`; when an
  `initial_state` `[N, H, K, V]` is given or the final states are asked for, the N sequences are unpacked
  into N rows right-padded with zeros (a zero key and a zero log-decay leave a state unchanged), so each
  row starts from its own initial state and ends in its own final state, and the outputs are packed back;
- the `fused_recurrent_*` forms give the same results as the `chunk_*` forms; when every sequence has one
  token (decoding) they call the op's single-step form.

`cu_seqlens` must be concrete (a NumPy or jax array, or a list, outside `jit`): the layout depends on it.
Every function also takes a keyword-only `implementation=` passed to the zoo op (None: the backend's
default). fla's options that change the maths or the layout (`use_gate_in_kernel`, `use_beta_sigmoid_in_kernel`,
`state_v_first`, `window_size`, per-value decays `gv`, ...) are not taken: unknown keywords raise TypeError,
the few that fla places before the supported ones raise ValueError unless left at their defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.kernels._common import checks
from icml26zoo.kernels.delta_rule import gated_delta_rule, gated_delta_rule_step
from icml26zoo.kernels.forgetting_attention import forgetting_attention
from icml26zoo.kernels.ssd import ssd, ssd_step

__all__ = [
    "chunk_delta_rule",
    "chunk_gated_delta_rule",
    "chunk_gla",
    "chunk_kda",
    "chunk_simple_gla",
    "fused_recurrent_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "fused_recurrent_gla",
    "fused_recurrent_kda",
    "fused_recurrent_simple_gla",
    "parallel_forgetting_attn",
]

L2_EPS = 1e-6  # fla's l2norm: x / sqrt(sum(x^2) + eps)

Arrays = Mapping[str, jax.Array | None]
# run(arrays, initial_state, segment_ids) -> (o, final state) on [B, T, ...] arrays: one zoo op call.
Run = Callable[[Arrays, jax.Array | None, jax.Array | None], tuple[jax.Array, jax.Array]]
# step(arrays, state) -> (o, new state) on [R, ...] arrays (one token per row): the op's decode form.
Step = Callable[[Arrays, jax.Array | None], tuple[jax.Array, jax.Array]]
FlaResult = tuple[jax.Array, jax.Array | None]


# --- argument conversion ----------------------------------------------------------------------------------


def _l2_normalize(x: jax.Array) -> jax.Array:
    """[..., K] -> x / sqrt(Σ x² + eps) over K, computed in float32, returned in x.dtype."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.sum(xf * xf, axis=-1, keepdims=True) + L2_EPS)).astype(x.dtype)


def _check_flag(op: str, name: str, value: Any) -> None:
    """`name` is a bool (fla's flags), not an array or a string that is always truthy."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{op}: `{name}` is {value!r}, expected True or False")


def _check_unsupported(op: str, name: str, value: Any, default: Any, why: str) -> None:
    """An fla argument the zoo op has no counterpart for must stay at its default."""
    if value is not default:
        raise ValueError(f"{op}: `{name}` is not supported (received {type(value).__name__}, expected "
                         f"{default!r}): {why}")


def _check_time_major(op: str, q: jax.Array, others: Arrays) -> None:
    """q [B, T, H, K] with T >= 1, and every other given array [B, T, ...] with q's B and T."""
    checks.require_arrays(op, {"q": q, **others}, optional=tuple(others))
    if q.ndim != 4:
        checks.fail_shape(op, "q", q.shape, "[B, T, H, K]")
    checks.require_length(op, "q", q)
    b, t = q.shape[:2]
    for name, x in others.items():
        if x is not None and (x.ndim < 3 or x.shape[:2] != (b, t)):
            checks.fail_shape(op, name, x.shape, f"[B, T, ...] = ({b}, {t}, ...), q's batch and length")


def _qk(op: str, q: jax.Array, k: jax.Array, v: jax.Array, use_qk_l2norm_in_kernel: bool) -> tuple[jax.Array, ...]:
    """q, k normalized when asked, and repeated per value-head group when v has more heads (fla's GVA)."""
    _check_flag(op, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    if use_qk_l2norm_in_kernel:
        q, k = _l2_normalize(q), _l2_normalize(k)
    heads, value_heads = q.shape[2], v.shape[2]
    if k.shape == q.shape and value_heads > heads and value_heads % heads == 0:
        q, k = (jnp.repeat(x, value_heads // heads, axis=2) for x in (q, k))
    return q, k


# --- cu_seqlens -------------------------------------------------------------------------------------------


def _lengths(op: str, cu_seqlens: Any, batch: int, length: int) -> np.ndarray:
    """[N] lengths of the packed sequences; ValueError naming `cu_seqlens` unless it is [N + 1] cumulative
    lengths, concrete, strictly increasing from 0 to T, over a batch of one row."""
    if isinstance(cu_seqlens, jax.core.Tracer):
        raise ValueError(f"{op}: `cu_seqlens` is traced; expected a concrete array (the layout depends on its "
                         "values): pass it from outside `jit`, or as a static NumPy array")
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1 or cu.size < 2 or not np.issubdtype(cu.dtype, np.integer):
        raise ValueError(f"{op}: `cu_seqlens` has shape {cu.shape} and dtype {cu.dtype}, expected an integer "
                         "[N + 1] array of cumulative lengths with N >= 1")
    if cu[0] != 0 or cu[-1] != length or not np.all(np.diff(cu) > 0):
        raise ValueError(f"{op}: `cu_seqlens` is {cu.tolist()}, expected strictly increasing values from 0 to "
                         f"T = {length} (every sequence at least one token long)")
    if batch != 1:
        raise ValueError(f"{op}: `cu_seqlens` needs a batch of one row (the sequences concatenated along T); "
                         f"q has batch size {batch}")
    return np.diff(cu)


def _segment_ids(lengths: np.ndarray) -> jax.Array:
    """[1, T] int32: the index of the sequence that holds each token."""
    return jnp.asarray(np.repeat(np.arange(lengths.size), lengths)[None], jnp.int32)


def _row_positions(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, W] packed position of row n's token t (clipped), and [N, W] True where the row holds a token."""
    starts = np.cumsum(lengths) - lengths
    t = np.arange(int(lengths.max()))
    valid = t[None, :] < lengths[:, None]
    return np.where(valid, starts[:, None] + t[None, :], 0), valid


def _unpack(x: jax.Array, lengths: np.ndarray) -> jax.Array:
    """[1, T, ...] -> [N, W, ...]: one sequence per row, right-padded with zeros to the longest W."""
    positions, valid = _row_positions(lengths)
    rows = x[0][positions]
    return jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), rows, jnp.zeros((), x.dtype))


def _pack(rows: jax.Array, lengths: np.ndarray) -> jax.Array:
    """[N, W, ...] -> [1, T, ...]: the inverse of `_unpack` (padding dropped)."""
    _, valid = _row_positions(lengths)
    return rows[np.nonzero(valid)][None]


def _check_state_rows(op: str, initial_state: jax.Array | None, rows: int, layout: str) -> None:
    """With `cu_seqlens`, the initial state holds one row per sequence."""
    checks.require_arrays(op, {"initial_state": initial_state}, optional=("initial_state",))
    if initial_state is not None and (initial_state.ndim != 4 or initial_state.shape[0] != rows):
        checks.fail_shape(op, "initial_state", initial_state.shape,
                          f"{layout} with N = len(cu_seqlens) - 1 = {rows}, one state per sequence")


# --- the call in fla's layout -----------------------------------------------------------------------------


def _as_steps(arrays: Arrays, packed: bool) -> Arrays:
    """[B, 1, ...] (or, packed, [1, N, ...] with N one-token sequences) -> [R, ...], one token per row."""
    return {name: None if x is None else (x[0] if packed else x[:, 0]) for name, x in arrays.items()}


def _run_packed(op: str, run: Run, arrays: Arrays, initial_state: jax.Array | None, lengths: np.ndarray,
                output_final_state: bool, layout: str) -> tuple[jax.Array, jax.Array]:
    """One `run` over sequences packed by `cu_seqlens`: by `segment_ids` when no per-sequence state is in play,
    else one zero-padded row per sequence."""
    if initial_state is None and not output_final_state:
        return run(arrays, None, _segment_ids(lengths))
    _check_state_rows(op, initial_state, lengths.size, layout)
    rows = {name: None if x is None else _unpack(x, lengths) for name, x in arrays.items()}
    o_rows, final = run(rows, initial_state, None)
    return _pack(o_rows, lengths), final


def _call(op: str, run: Run, arrays: Arrays, initial_state: jax.Array | None, output_final_state: bool,
          cu_seqlens: Any, *, step: Step | None = None, layout: str = "[N, H, K, V]") -> FlaResult:
    """fla's state conventions around one zoo op call; `arrays` are [B, T, ...], the first one q."""
    _check_flag(op, "output_final_state", output_final_state)
    batch, length = next(iter(arrays.values())).shape[:2]
    lengths = None if cu_seqlens is None else _lengths(op, cu_seqlens, batch, length)
    one_token_each = length == 1 if lengths is None else bool(np.all(lengths == 1))
    if step is not None and one_token_each:
        if lengths is not None:
            _check_state_rows(op, initial_state, lengths.size, layout)
        o, final = step(_as_steps(arrays, packed=lengths is not None), initial_state)
        o = o[None] if lengths is not None else o[:, None]
    elif lengths is None:
        o, final = run(arrays, initial_state, None)
    else:
        o, final = _run_packed(op, run, arrays, initial_state, lengths, output_final_state, layout)
    return o, (final if output_final_state else None)


# --- delta-rule family: gated_delta_rule ------------------------------------------------------------------


def _delta_run(implementation: None | str | Sequence[str], scale: float | None) -> Run:
    def run(a: Arrays, initial_state: jax.Array | None, segment_ids: jax.Array | None) -> tuple[jax.Array, ...]:
        return gated_delta_rule(a["q"], a["k"], a["v"], beta=a["beta"], g=a["g"], scale=scale,
                                initial_state=initial_state, segment_ids=segment_ids, implementation=implementation)
    return run


def _delta_step(scale: float | None) -> Step:
    def step(a: Arrays, state: jax.Array | None) -> tuple[jax.Array, jax.Array]:
        if state is None:
            state = jnp.zeros(a["k"].shape + a["v"].shape[-1:], jnp.float32)
        return gated_delta_rule_step(a["q"], a["k"], a["v"], beta=a["beta"], g=a["g"], state=state, scale=scale)
    return step


def _delta(op: str, q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array | None, beta: jax.Array | None,
           scale: float | None, initial_state: jax.Array | None, output_final_state: bool,
           use_qk_l2norm_in_kernel: bool, cu_seqlens: Any, implementation: None | str | Sequence[str],
           recurrent: bool) -> FlaResult:
    """The gated delta rule in fla's conventions; `recurrent` uses the single-step op for one-token sequences."""
    _check_time_major(op, q, {"k": k, "v": v, "g": g, "beta": beta})
    q, k = _qk(op, q, k, v, use_qk_l2norm_in_kernel)
    if beta is None:  # fla's fused_recurrent forms: beta defaults to ones
        beta = jnp.ones(v.shape[:3], q.dtype)
    arrays = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    step = _delta_step(scale) if recurrent else None
    return _call(op, _delta_run(implementation, scale), arrays, initial_state, output_final_state, cu_seqlens,
                 step=step)


def chunk_gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array, beta: jax.Array,
                           scale: float | None = None, initial_state: jax.Array | None = None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           cu_seqlens: Any = None, *,
                           implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `chunk_gated_delta_rule` -> `gated_delta_rule(q, k, v, beta=beta, g=g, ...)`.

    Args:
      q, k: [B, T, H, K]; v: [B, T, HV, V] with HV a multiple of H (q and k repeated per value-head group);
      g: [B, T, HV] log-decay (<= 0); beta: [B, T, HV] in [0, 2].
      scale: None means K ** -0.5. initial_state: [N, HV, K, V] or None (zeros), N = B, or the number of
      sequences with `cu_seqlens`. output_final_state: return the final states. use_qk_l2norm_in_kernel:
      L2-normalize q and k first. cu_seqlens: [N + 1] cumulative lengths, batch 1.
    Returns:
      o [B, T, HV, V] in q.dtype, and final state float32 [N, HV, K, V] or None.
    """
    return _delta("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                  use_qk_l2norm_in_kernel, cu_seqlens, implementation, recurrent=False)


def fused_recurrent_gated_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array | None = None,
                                     gk: jax.Array | None = None, gv: jax.Array | None = None,
                                     beta: jax.Array | None = None, scale: float | None = None,
                                     initial_state: jax.Array | None = None, output_final_state: bool = False,
                                     use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Any = None, *,
                                     implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `fused_recurrent_gated_delta_rule` -> `gated_delta_rule` (`gated_delta_rule_step` when every
    sequence has one token).

    Args as `chunk_gated_delta_rule`, with g [B, T, HV] and gk [B, T, HV, K] optional log-decays (both given:
    the state decays by exp(g + gk) per key row), beta None meaning ones, and gv (per-value decay) not
    supported (ValueError unless None).
    Returns:
      o [B, T, HV, V] in q.dtype, and final state float32 [N, HV, K, V] or None.
    """
    op = "fused_recurrent_gated_delta_rule"
    _check_unsupported(op, "gv", gv, None, "the zoo's gated delta rule has no per-value decay")
    _check_time_major(op, q, {"g": g, "gk": gk})
    if g is not None and gk is not None:
        g = g[..., None] + gk
    return _delta(op, q, k, v, gk if g is None else g, beta, scale, initial_state, output_final_state,
                  use_qk_l2norm_in_kernel, cu_seqlens, implementation, recurrent=True)


def chunk_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, scale: float | None = None,
                     initial_state: jax.Array | None = None, output_final_state: bool = False,
                     use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Any = None, *,
                     implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `chunk_delta_rule` (DeltaNet) -> `gated_delta_rule(q, k, v, beta=beta, g=None, ...)`.

    Args:
      q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H] in [0, 2]; the rest as `chunk_gated_delta_rule`.
    Returns:
      o [B, T, H, V] in q.dtype, and final state float32 [N, H, K, V] or None.
    """
    return _delta("chunk_delta_rule", q, k, v, None, beta, scale, initial_state, output_final_state,
                  use_qk_l2norm_in_kernel, cu_seqlens, implementation, recurrent=False)


def fused_recurrent_delta_rule(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array | None = None,
                               scale: float | None = None, initial_state: jax.Array | None = None,
                               output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                               cu_seqlens: Any = None, *,
                               implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `fused_recurrent_delta_rule` -> `gated_delta_rule` with g=None (the step op for one-token
    sequences); beta None means ones. Args and returns as `chunk_delta_rule`."""
    return _delta("fused_recurrent_delta_rule", q, k, v, None, beta, scale, initial_state, output_final_state,
                  use_qk_l2norm_in_kernel, cu_seqlens, implementation, recurrent=True)


def chunk_kda(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array, beta: jax.Array, scale: float | None = None,
              initial_state: jax.Array | None = None, output_final_state: bool = False,
              use_qk_l2norm_in_kernel: bool = False, use_gate_in_kernel: bool = False, cu_seqlens: Any = None, *,
              implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `chunk_kda` (Kimi Delta Attention) -> `gated_delta_rule` with the per-channel decay g [B, T, H, K].

    Args as `chunk_gated_delta_rule` with g [B, T, HV, K] log-decay (<= 0), already activated:
    `use_gate_in_kernel=True` (fla computes the decay from raw g inside) is not supported (ValueError).
    Returns:
      o [B, T, HV, V] in q.dtype, and final state float32 [N, HV, K, V] or None.
    """
    _check_unsupported("chunk_kda", "use_gate_in_kernel", use_gate_in_kernel, False,
                       "pass g as the log-decay, already activated")
    return _delta("chunk_kda", q, k, v, g, beta, scale, initial_state, output_final_state,
                  use_qk_l2norm_in_kernel, cu_seqlens, implementation, recurrent=False)


def fused_recurrent_kda(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array, beta: jax.Array,
                        A_log: jax.Array | None = None, dt_bias: jax.Array | None = None,  # noqa: N803 (fla's name)
                        scale: float | None = None, initial_state: jax.Array | None = None,
                        output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                        use_gate_in_kernel: bool = False, cu_seqlens: Any = None, *,
                        implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `fused_recurrent_kda` -> `gated_delta_rule` with g [B, T, HV, K] (the step op for one-token
    sequences). `A_log`, `dt_bias` and `use_gate_in_kernel` (the in-kernel gate activation) must stay at their
    defaults. Args and returns as `chunk_kda`."""
    op = "fused_recurrent_kda"
    for name, value, default in (("A_log", A_log, None), ("dt_bias", dt_bias, None),
                                 ("use_gate_in_kernel", use_gate_in_kernel, False)):
        _check_unsupported(op, name, value, default, "pass g as the log-decay, already activated")
    return _delta(op, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                  cu_seqlens, implementation, recurrent=True)


# --- linear attention with decay (GLA, simple GLA): ssd ---------------------------------------------------
# ssd keeps S [P, N] = [V, K] with S <- S diag(exp(a)) + x b^T, y = S c: fla's [K, V] state transposed, with
# x = v, b = k, c = scale q, a = g.


def _scaled(op: str, q: jax.Array, scale: float | None) -> jax.Array:
    """scale * q (None: K ** -0.5), computed in float32 and returned in q.dtype."""
    checks.check_scale(op, scale)
    factor = q.shape[-1] ** -0.5 if scale is None else scale
    return (q.astype(jnp.float32) * factor).astype(q.dtype)


def _transpose_state(state: jax.Array | None) -> jax.Array | None:
    """[N, H, K, V] <-> [N, H, V, K]."""
    return None if state is None else jnp.swapaxes(state, -1, -2)


def _ssd_run(implementation: None | str | Sequence[str]) -> Run:
    def run(a: Arrays, initial_state: jax.Array | None, segment_ids: jax.Array | None) -> tuple[jax.Array, ...]:
        y, final = ssd(a["v"], a["g"], a["k"], a["q"], initial_state=_transpose_state(initial_state),
                       segment_ids=segment_ids, implementation=implementation)
        return y, _transpose_state(final)
    return run


def _ssd_step(a: Arrays, state: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    y, new = ssd_step(a["v"], a["g"], a["k"], a["q"], state=_transpose_state(state))
    return y, _transpose_state(new)


def _gla(op: str, q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array, per_key: bool, scale: float | None,
         initial_state: jax.Array | None, output_final_state: bool, cu_seqlens: Any,
         implementation: None | str | Sequence[str], recurrent: bool) -> FlaResult:
    """Gated linear attention in fla's conventions: S <- diag(exp(g)) S + k v^T, o = S^T (scale q)."""
    _check_time_major(op, q, {"k": k, "v": v, "g": g})
    b, t, h, dk = q.shape
    if k.shape != q.shape:
        checks.fail_shape(op, "k", k.shape, f"{q.shape} = q.shape")
    if v.ndim != 4 or v.shape[2] != h:
        checks.fail_shape(op, "v", v.shape, f"[B, T, H, V] = ({b}, {t}, {h}, V)")
    want_g = (b, t, h, dk) if per_key else (b, t, h)
    if g.shape != want_g:
        checks.fail_shape(op, "g", g.shape, f"{want_g} = {'[B, T, H, K]' if per_key else '[B, T, H]'}")
    arrays = {"q": _scaled(op, q, scale), "k": k, "v": v, "g": g}
    return _call(op, _ssd_run(implementation), arrays, initial_state, output_final_state, cu_seqlens,
                 step=_ssd_step if recurrent else None)


def _simple_gate(op: str, q: jax.Array, g: jax.Array | None, g_gamma: jax.Array | None) -> jax.Array:
    """[B, T, H] log-decay from fla's data-dependent `g` or head-wise constant `g_gamma` [H] (neither: zeros)."""
    if g is not None and g_gamma is not None:
        raise ValueError(f"{op}: `g` and `g_gamma` are both given, expected at most one of them")
    if g_gamma is None:
        return jnp.zeros(q.shape[:3], jnp.float32) if g is None else g
    checks.require_arrays(op, {"g_gamma": g_gamma})
    if g_gamma.shape != q.shape[2:3]:
        checks.fail_shape(op, "g_gamma", g_gamma.shape, f"{q.shape[2:3]} = [H]")
    return jnp.broadcast_to(g_gamma, q.shape[:3])


def chunk_simple_gla(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array | None = None,
                     g_gamma: jax.Array | None = None, scale: float | None = None,
                     initial_state: jax.Array | None = None, output_final_state: bool = False,
                     cu_seqlens: Any = None, *, implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `chunk_simple_gla` (one decay per head and token) -> `ssd` with a scalar decay.

    Args:
      q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] log-decay (<= 0) or None; g_gamma: [H] a constant
      log-decay per head or None (at most one of g, g_gamma; neither: no decay). scale: None means K ** -0.5.
      initial_state: [N, H, K, V] or None; output_final_state; cu_seqlens: [N + 1], batch 1.
    Returns:
      o [B, T, H, V] in v.dtype, and final state float32 [N, H, K, V] or None.
    """
    op = "chunk_simple_gla"
    _check_time_major(op, q, {"g": g})
    return _gla(op, q, k, v, _simple_gate(op, q, g, g_gamma), False, scale, initial_state, output_final_state,
                cu_seqlens, implementation, recurrent=False)


def fused_recurrent_simple_gla(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array | None = None,
                               g_gamma: jax.Array | None = None, scale: float | None = None,
                               initial_state: jax.Array | None = None, output_final_state: bool = False,
                               reverse: bool = False, cu_seqlens: Any = None, *,
                               implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `fused_recurrent_simple_gla` -> `ssd` (`ssd_step` when every sequence has one token).
    `reverse=True` (right-to-left recurrence) is not supported (ValueError). Args and returns as
    `chunk_simple_gla`."""
    op = "fused_recurrent_simple_gla"
    _check_unsupported(op, "reverse", reverse, False, "the zoo's recurrences run left to right")
    _check_time_major(op, q, {"g": g})
    return _gla(op, q, k, v, _simple_gate(op, q, g, g_gamma), False, scale, initial_state, output_final_state,
                cu_seqlens, implementation, recurrent=True)


def chunk_gla(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array, scale: float | None = None,
              initial_state: jax.Array | None = None, output_final_state: bool = False, cu_seqlens: Any = None, *,
              implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `chunk_gla` (gated linear attention, one decay per key channel) -> `ssd` with a diagonal decay.

    Args as `chunk_simple_gla` with g [B, T, H, K] log-decay (<= 0), required.
    Returns:
      o [B, T, H, V] in v.dtype, and final state float32 [N, H, K, V] or None.
    """
    return _gla("chunk_gla", q, k, v, g, True, scale, initial_state, output_final_state, cu_seqlens,
                implementation, recurrent=False)


def fused_recurrent_gla(q: jax.Array, k: jax.Array, v: jax.Array, gk: jax.Array | None = None,
                        gv: jax.Array | None = None, scale: float | None = None,
                        initial_state: jax.Array | None = None, output_final_state: bool = False,
                        reverse: bool = False, cu_seqlens: Any = None, *,
                        implementation: None | str | Sequence[str] = None) -> FlaResult:
    """fla's `fused_recurrent_gla` -> `ssd` with the per-key decay gk [B, T, H, K] (None: no decay); `ssd_step`
    when every sequence has one token. `gv` (per-value decay) and `reverse=True` are not supported
    (ValueError). Returns as `chunk_gla`."""
    op = "fused_recurrent_gla"
    _check_unsupported(op, "gv", gv, None, "ssd decays the state along K only")
    _check_unsupported(op, "reverse", reverse, False, "the zoo's recurrences run left to right")
    _check_time_major(op, q, {"gk": gk})
    g = jnp.zeros(q.shape, jnp.float32) if gk is None else gk
    return _gla(op, q, k, v, g, True, scale, initial_state, output_final_state, cu_seqlens, implementation,
                recurrent=True)


# --- forgetting attention ---------------------------------------------------------------------------------


def parallel_forgetting_attn(q: jax.Array, k: jax.Array, v: jax.Array, g: jax.Array, scale: float | None = None,
                             window_size: int | None = None, cu_seqlens: Any = None, *,
                             implementation: None | str | Sequence[str] = None) -> jax.Array:
    """fla's `parallel_forgetting_attn` (FoX) -> `forgetting_attention(q, k, v, g, ...)`.

    Args:
      q: [B, T, HQ, K]; k: [B, T, H, K]; v: [B, T, H, V] (GQA when H divides HQ); g: [B, T, HQ] log forget
      gate (<= 0). scale: None means K ** -0.5. window_size: must be None (no sliding window in the zoo).
      cu_seqlens: [N + 1] cumulative lengths, batch 1 (no attention across sequences).
    Returns:
      o [B, T, HQ, V] in q.dtype (fla returns no state here either).
    """
    op = "parallel_forgetting_attn"
    _check_unsupported(op, "window_size", window_size, None, "the zoo's forgetting attention has no window")
    _check_time_major(op, q, {"k": k, "v": v, "g": g})
    segment_ids = None
    if cu_seqlens is not None:
        segment_ids = _segment_ids(_lengths(op, cu_seqlens, *q.shape[:2]))
    return forgetting_attention(q, k, v, g, scale=scale, segment_ids=segment_ids, implementation=implementation)
