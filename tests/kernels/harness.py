"""The one parity harness for ops: each op's test file declares an `OpCase` and calls these checks.

- `check_forward_and_grads`: every fast path against the reference, forward (outputs and final state) and
  every gradient through one VJP with RANDOM cotangents on every output (the final state included), so the
  initial-state gradient and the gradient through the final state are both checked.
- `check_packed_equals_segments_alone`: packed rows equal each segment run alone (the state resets at each
  start, `initial_state` reaches only a row's first segment), outputs, final states and gradients;
  `check_packed_equals_loop`: the same for the forward, against any per-segment oracle.
- `check_decode_equals_forward`: the op's `<op>_step(inputs..., *, state) -> (o, state)` looped over T equals
  the forward.
- chex shape and dtype checks on outputs and gradients; bounds from the suite's one table (`tests/tolerances.py`).

Compile once, check many: compiles dominate on CPU, and every jitted program is cached per (path, chunk size,
shapes). A parity case compiles one VJP per path; `outputs`, the packed-rows check and the decode check
(`via_vjp=True`) run on those programs when their shapes match (same B, T, chunk size, plain or packed), so
an op's file picks its parity cases to serve its other checks too.

Example (an op `scan(x, a, *, initial_state=None, segment_ids=None, chunk_size=64) -> (y, S)`):

    def make(rng: np.random.Generator, batch: int, length: int) -> dict[str, jax.Array]:
        x = jnp.asarray(rng.standard_normal((batch, length, 4)), jnp.float32)         # [B, T, P]
        a = jnp.asarray(-rng.uniform(0, 5, (batch, length)), jnp.float32)             # [B, T]
        return {"x": x, "a": a, "initial_state": jnp.ones((batch, 4), jnp.float32)}   # [B, P]

    CASE = OpCase(name="scan", make_inputs=make, reference=reference.scan, fast={"xla": xla.scan},
                  differentiable=("x", "a", "initial_state"), time_inputs=("x", "a"), step=scan_step)

    @pytest.mark.parametrize("length, chunk", [(1, 16), (100, 64), (129, 16)])
    def test_parity(length, chunk):
        check_forward_and_grads(CASE, length, chunk_size=chunk, packed=True)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import Tol, tolerance

CHUNK_SIZES = (16, 64)

Inputs = dict[str, Any]
Bounds = Sequence[Sequence[int]]


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One op under test.

    Every callable is called with the inputs as keywords (`fn(**inputs)`), plus `chunk_arg=chunk_size` for
    the fast paths when a chunk size is given.

    name: the op's entry in the tolerance table.
    make_inputs: (rng, batch, length) -> the op's keyword inputs, float32, without `segment_ids` (the
      harness adds them); `[B, T, ...]` for the names in `time_inputs`.
    reference: the oracle path. fast: the other paths by name.
    differentiable: the inputs that get gradients (`initial_state` included when the op has one).
    time_inputs: the per-step inputs `[B, T, ...]` (sliced per segment and per decode step); every other
      input except `state_input` is shared by all rows and steps (a filter, a decay matrix, a skip).
    state_input: the name of the initial state (`[B, ...]` or a tuple of them), or None.
    returns_state: the op returns `(output, final_state)` rather than the output alone.
    chunk_arg: the keyword through which the fast paths take a chunk size (None: they take none).
    step: `<op>_step(time inputs at t, shared inputs..., *, state) -> (o_t, state)`, or None.
    init_state: inputs -> the decode state before step 0 (default: the `state_input`).
    slice_segment: (inputs, row, lo, hi) -> the inputs of row `row`, positions lo:hi, run alone (default:
      time inputs sliced, the state input kept for the first segment of the row and None after).
    """

    name: str
    make_inputs: Callable[[np.random.Generator, int, int], Inputs]
    reference: Callable[..., Any]
    fast: Mapping[str, Callable[..., Any]]
    differentiable: tuple[str, ...]
    time_inputs: tuple[str, ...]
    state_input: str | None = "initial_state"
    returns_state: bool = True
    chunk_arg: str | None = "chunk_size"
    step: Callable[..., Any] | None = None
    init_state: Callable[[Inputs], Any] | None = None
    slice_segment: Callable[[Inputs, int, int, int], Inputs] | None = None


def max_normalized_error(got: Any, want: Any, floor: float = 1.0) -> float:
    """max|got − want| / max(max|want|, floor), in float64."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.size == 0:
        return 0.0
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), floor))


def assert_close(got: Any, want: Any, tol: Tol, *, kind: str = "fwd", what: str = "") -> None:
    """One array against another: equal shapes, finite, and within `tol` (`kind` "fwd" or "grad")."""
    bound = tol.fwd if kind == "fwd" else tol.grad
    if bound is None:
        raise ValueError(f"assert_close: `kind` is {kind!r} but the entry has no bound for it ({tol.reason})")
    chex.assert_equal_shape([got, want])
    assert np.all(np.isfinite(np.asarray(got, np.float32))), f"{what}: non-finite values"
    if tol.metric == "allclose":
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=bound, rtol=tol.rtol, err_msg=what)
        return
    err = max_normalized_error(got, want, tol.floor)
    assert err < bound, f"{what}: max-normalized error {err:.2e} >= {bound:.1e}"
    abs_bound = tol.abs_fwd if kind == "fwd" else tol.abs_grad
    if abs_bound is not None:
        abs_err = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
        assert abs_err < abs_bound, f"{what}: max-abs error {abs_err:.2e} >= {abs_bound:.1e}"


def assert_trees_close(got: Any, want: Any, tol: Tol, *, kind: str = "fwd", what: str = "") -> None:
    """`assert_close` leaf by leaf, after chex checks that both trees have the same structure, shapes and dtypes."""
    chex.assert_trees_all_equal_shapes_and_dtypes(got, want)
    leaves = jax.tree_util.tree_leaves_with_path(got)
    for (path, g), w in zip(leaves, jax.tree_util.tree_leaves(want), strict=True):
        assert_close(g, w, tol, kind=kind, what=f"{what}{jax.tree_util.keystr(path)}")


def segment_ids_from_bounds(bounds: Bounds) -> jax.Array:
    """[B, T] int32 ids from one list of segment edges per row (`[0, ..., T]`, equal T on every row)."""
    length = bounds[0][-1]
    ids = np.zeros((len(bounds), length), np.int32)
    for row, edges in enumerate(bounds):
        if edges[0] != 0 or edges[-1] != length or list(edges) != sorted(edges):
            raise ValueError(f"segment_ids_from_bounds: row {row} has edges {edges}, expected 0 < ... < {length}")
        ids[row] = np.repeat(np.arange(len(edges) - 1), np.diff(edges))
    return jnp.asarray(ids)


def random_segment_ids(rng: np.random.Generator, batch: int, length: int) -> jax.Array:
    """[B, T] sorted random ids in 1..3 (0..3 random starts per row); row 0 opens with a one-token segment 0."""
    ids = np.sort(rng.integers(1, 4, size=(batch, length)), axis=1)
    ids[0, 0] = 0
    return jnp.asarray(ids, jnp.int32)


def make_case_inputs(case: OpCase, length: int, *, batch: int = 2, seed: int = 0, packed: bool = False,
                     bounds: Bounds | None = None) -> Inputs:
    """The case's inputs with `segment_ids`: None, random (`packed`) or from `bounds` (which fixes B and T)."""
    rng = np.random.default_rng(seed)
    if bounds is not None:
        batch, length = len(bounds), bounds[0][-1]
    inputs = case.make_inputs(rng, batch, length)
    if bounds is not None:
        inputs["segment_ids"] = segment_ids_from_bounds(bounds)
    else:
        inputs["segment_ids"] = random_segment_ids(rng, batch, length) if packed else None
    return inputs


def _static(case: OpCase, chunk_size: int | None) -> tuple[tuple[str, int], ...]:
    return () if chunk_size is None or case.chunk_arg is None else ((case.chunk_arg, chunk_size),)


def _resolve(case: OpCase, impl: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(impl):
        return impl
    if impl == "reference":
        return case.reference
    if impl not in case.fast:
        raise ValueError(f"{case.name}: `impl` is {impl!r}, expected 'reference' or one of {sorted(case.fast)}")
    return case.fast[impl]


# The parity checks compile many small programs: XLA's backend optimization level 0 halves compile time
# (measured 5.8 s -> 2.7 s for one delta-rule case) and leaves the HLO, hence the float results, as they are.
# XLA:CPU's elemental (non-fusion) emitters cut the LLVM work again by 2-3x (KDA VJP at T = 63: 2.4 s -> 0.7 s;
# FoX xla VJP at T = 100: 1.8 s -> 0.5 s; a TPU-interpreted kernel: 2.5 s -> 1.1 s). They compute the same HLO
# with other loop code: outputs and gradients move by ~1e-8 relative (measured: KDA T = 129, xla and pallas
# VJPs), two orders below every bound of tests/tolerances.py, and each check still compares two programs
# compiled under the same options. Only passed where this XLA knows the option (see `fast_compile`).
_CHEAP_PIPELINE = {"xla_backend_optimization_level": 0}
_ELEMENTAL_EMITTERS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def fast_compile() -> dict[str, Any]:
    """The kernel tests' compile options: the cheap pipeline, plus the elemental emitters where this jaxlib's
    compiler knows them (probed once with a tiny compile, at the first jit rather than at import).
    ZOO_KERNEL_TESTS_FUSION_EMITTERS=1 keeps XLA's default emitters (to compare the two)."""
    if os.environ.get("ZOO_KERNEL_TESTS_FUSION_EMITTERS") == "1":
        return dict(_CHEAP_PIPELINE)
    try:
        jax.jit(lambda x: x + 1, compiler_options=_ELEMENTAL_EMITTERS).lower(np.float32(0)).compile()
    except Exception:  # an XLA without the option: "No such compile option"
        return dict(_CHEAP_PIPELINE)
    return {**_CHEAP_PIPELINE, **_ELEMENTAL_EMITTERS}


def jit(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """`jax.jit` with the kernel tests' compile options (`fast_compile()`): the tests' own jits go through here."""
    return jax.jit(fn, compiler_options=fast_compile(), **kwargs)


@functools.cache
def _jitted_vjp(fn: Callable[..., Any], static: tuple[tuple[str, int], ...],
                differentiable: tuple[str, ...]) -> Callable[[Inputs, Any], tuple[Any, Inputs]]:
    """One jitted (inputs, cotangents) -> (outputs, gradients) per path and chunk size: equal shapes compile once."""

    def run(inputs: Inputs, cotangents: Any) -> tuple[Any, Inputs]:
        rest = {n: v for n, v in inputs.items() if n not in differentiable}
        call = lambda diff: fn(**diff, **rest, **dict(static))
        out, pull = jax.vjp(call, {n: inputs[n] for n in differentiable})
        return out, pull(cotangents)[0]

    return jit(run)


@functools.cache
def _jitted(fn: Callable[..., Any], static: tuple[tuple[str, int], ...]) -> Callable[[Inputs], Any]:
    return jit(lambda inputs: fn(**inputs, **dict(static)))


def _path(case: OpCase, impl: str, chunk_size: int | None) -> Callable[[Inputs], Any]:
    """The jitted forward of one path: inputs -> outputs (the reference takes no chunk size)."""
    return _jitted(_resolve(case, impl), () if impl == "reference" else _static(case, chunk_size))


def random_cotangents(rng: np.random.Generator, outputs: Any) -> Any:
    """Standard-normal cotangents shaped and typed like every leaf of `outputs` (arrays or ShapeDtypeStructs)."""
    return jax.tree.map(lambda o: jnp.asarray(rng.standard_normal(o.shape), o.dtype), outputs)


def forward_and_grads(case: OpCase, impl: str | Callable[..., Any], inputs: Inputs, cotangents: Any,
                      chunk_size: int | None = None) -> tuple[Any, Inputs]:
    """(outputs, {name: gradient}) of one path through its VJP with the given cotangents."""
    static = () if impl == "reference" else _static(case, chunk_size)
    return _jitted_vjp(_resolve(case, impl), static, case.differentiable)(inputs, cotangents)


def outputs(case: OpCase, impl: str, inputs: Inputs, chunk_size: int | None = None) -> Any:
    """The path's outputs, read from its jitted VJP (zero cotangents): where a parity check ran on the same
    shapes (`check_forward_and_grads`), nothing compiles; elsewhere a VJP compiles, dearer than a forward."""
    shapes = jax.eval_shape(lambda i: case.reference(**i), inputs)
    zeros = jax.tree.map(lambda o: jnp.zeros(o.shape, o.dtype), shapes)
    return forward_and_grads(case, impl, inputs, zeros, chunk_size)[0]


def check_forward_and_grads(case: OpCase, length: int, *, chunk_size: int | None = None, packed: bool = False,
                            bounds: Bounds | None = None, impls: Sequence[str] | None = None, batch: int = 2,
                            seed: int = 0, tol: Tol | None = None) -> tuple[Any, Inputs]:
    """Every path in `impls` (default: all of `case.fast`) against the reference: outputs at `tol.fwd`, every
    gradient at `tol.grad`, with random cotangents on every output; gradients shaped and typed as their inputs.

    Returns the reference's (outputs, gradients) for extra, op-specific assertions.
    """
    tol = tolerance(case.name) if tol is None else tol
    inputs = make_case_inputs(case, length, batch=batch, seed=seed, packed=packed, bounds=bounds)
    shapes = jax.eval_shape(lambda i: case.reference(**i), inputs)
    cotangents = random_cotangents(np.random.default_rng(seed + 1), shapes)
    want = forward_and_grads(case, "reference", inputs, cotangents)
    chex.assert_trees_all_equal_shapes_and_dtypes(want[1], {n: inputs[n] for n in case.differentiable})
    for impl in case.fast if impls is None else impls:
        out, grads = forward_and_grads(case, impl, inputs, cotangents, chunk_size)
        label = f"{case.name}[{impl}, T={length}, chunk={chunk_size}, packed={packed or bounds is not None}]"
        assert_trees_close(out, want[0], tol, kind="fwd", what=f"{label} output")
        if tol.grad is not None:
            assert_trees_close(grads, want[1], tol, kind="grad", what=f"{label} d")
    return want


def _default_slice(case: OpCase, inputs: Inputs, row: int, lo: int, hi: int) -> Inputs:
    """Row `row`, positions lo:hi of the time inputs; the initial state only when the segment opens the row."""
    alone = {n: v for n, v in inputs.items() if n != "segment_ids"}
    for name in case.time_inputs:
        alone[name] = inputs[name][row:row + 1, lo:hi]
    if case.state_input is not None and inputs.get(case.state_input) is not None:
        state = inputs[case.state_input]
        alone[case.state_input] = jax.tree.map(lambda s: s[row:row + 1], state) if lo == 0 else None
    return alone


def check_packed_equals_loop(case: OpCase, bounds: Bounds, *, impl: str = "reference",
                             alone: str | Callable[..., Any] | None = None, chunk_size: int | None = None,
                             seed: int = 0, tol: Tol | None = None, via_vjp: bool = False) -> None:
    """Packed rows (`bounds`: one edge list per row) through `impl` equal each segment run alone through
    `alone` (default `impl`): outputs at every position and the final state of each row's last segment.

    `via_vjp`: read the packed forward from the path's jitted VJP (`outputs`), free next to
    `check_forward_and_grads(case, 0, bounds=bounds)`.
    """
    tol = tolerance(case.name) if tol is None else tol
    inputs = make_case_inputs(case, 0, seed=seed, bounds=bounds)
    packed = outputs(case, impl, inputs, chunk_size) if via_vjp else _path(case, impl, chunk_size)(inputs)
    if callable(alone):
        # An outside oracle (float64 numpy, say) need not be traceable: call it as it is.
        run_alone = lambda seg_inputs: alone(**seg_inputs)
    else:
        name = impl if alone is None else alone
        run_alone = _path(case, name, chunk_size)
    slicer = case.slice_segment or functools.partial(_default_slice, case)
    out, state = packed if case.returns_state else (packed, None)
    for row, edges in enumerate(bounds):
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            seg_inputs = slicer(inputs, row, lo, hi)
            result = run_alone(seg_inputs)
            out_i, state_i = result if case.returns_state else (result, None)
            what = f"{case.name}[{impl} packed vs {alone or impl} alone] row {row}, {lo}:{hi}"
            assert_close(out[row:row + 1, lo:hi], out_i[:, :hi - lo], tol, what=what)
        if case.returns_state:
            row_state = jax.tree.map(lambda s, r=row: s[r:r + 1], state)
            assert_trees_close(row_state, state_i, tol, what=f"{case.name} final state row {row}")


def _segments_in_rows(bounds: Bounds, rows: int) -> list[list[tuple[int, int, int]]]:
    """Every segment (row, lo, hi) of `bounds`, dealt into groups of `rows` (the last group may be short)."""
    segments = [(row, lo, hi) for row, edges in enumerate(bounds) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return [segments[i:i + rows] for i in range(0, len(segments), rows)]


def _row(tree: Any, row: int) -> Any:
    """Row `row` of every leaf (numpy), kept as a batch of one."""
    return jax.tree.map(lambda x: np.asarray(x)[row:row + 1], tree)


def _numpy(tree: Any) -> Any:
    """Every array leaf as numpy: slicing jax arrays eagerly compiles one small program per slice shape."""
    return jax.tree.map(lambda x: x if x is None else np.asarray(x), tree)


def _gather_rows(tree: Any, rows: Sequence[int | None]) -> Any:
    """Leaves [B, ...] whose row r is the leaf's row rows[r], or zeros where rows[r] is None."""
    def gather(x: jax.Array) -> jax.Array:
        x = np.asarray(x)
        return jnp.asarray(np.stack([np.zeros_like(x[0]) if i is None else x[i] for i in rows]))
    return jax.tree.map(gather, tree)


def _gather_spans(x: jax.Array, group: Sequence[tuple[int, int, int]], batch: int) -> jax.Array:
    """[B, T, ...] zeros with row r holding x[row, lo:hi] of the group's r-th segment at positions 0:hi-lo."""
    x = np.asarray(x)
    out = np.zeros(x.shape, x.dtype)
    for r, (row, lo, hi) in enumerate(group):
        out[r, :hi - lo] = x[row, lo:hi]
    return jnp.asarray(out[:batch])


def check_packed_equals_segments_alone(case: OpCase, bounds: Bounds, *, impl: str = "reference",
                                       chunk_size: int | None = None, grads: bool = True, seed: int = 0,
                                       tol: Tol | None = None) -> None:
    """Packed rows (`bounds`, [B, T]) through `impl` equal each segment run alone through `impl`: outputs at every
    position, the final state of each row's last segment and (`grads`) the gradients of every time input and
    of the initial state, with random cotangents on the packed outputs and final state.

    Compile once, check many: the packed rows run through the path's jitted VJP, and the segments run B at a
    time as the rows of a [B, T] batch without segment ids (rows are independent): each segment right-padded
    with zeros, with its slice of the packed cotangents (zeros on the padding, and on the final state unless
    the segment closes its packed row), from a zero initial state unless it opens its row. Next to
    `check_forward_and_grads(case, T, packed=True)` and `check_forward_and_grads(case, T)` with the same B and
    chunk size, this check compiles nothing. Zero steps must leave the op's state as it is (delta rules:
    beta = 0, g = 0; SSD: a = 0; selective scan: delta = 0) or come after everything they could touch
    (causal attention). Inputs that are neither time inputs nor the state (a shared filter) are not compared.
    """
    if case.slice_segment is not None:
        raise ValueError(f"{case.name}: `slice_segment` is set; use check_packed_equals_loop for this op")
    tol = tolerance(case.name) if tol is None else tol
    inputs = make_case_inputs(case, 0, seed=seed, bounds=bounds)
    batch = len(bounds)
    cotangents = random_cotangents(np.random.default_rng(seed + 1),
                                   jax.eval_shape(lambda i: case.reference(**i), inputs))
    packed_out, packed_grads = _numpy(forward_and_grads(case, impl, inputs, cotangents, chunk_size))
    out, state = packed_out if case.returns_state else (packed_out, None)
    d_out, d_state = _numpy(cotangents) if case.returns_state else (_numpy(cotangents), None)
    time_inputs = [name for name in case.time_inputs if inputs.get(name) is not None]
    state_name = case.state_input if case.state_input is not None and inputs.get(case.state_input) is not None \
        else None
    for group in _segments_in_rows(bounds, batch):
        padding = [None] * (batch - len(group))
        opens = [row if lo == 0 else None for row, lo, _ in group] + padding
        closes = [row if hi == bounds[row][-1] else None for row, _, hi in group] + padding
        alone = {n: v for n, v in inputs.items() if n != "segment_ids"} | {"segment_ids": None}
        alone |= {name: _gather_spans(inputs[name], group, batch) for name in time_inputs}
        if state_name is not None:
            alone[state_name] = _gather_rows(inputs[state_name], opens)
        d_alone = _gather_spans(d_out, group, batch)
        if case.returns_state:
            d_alone = (d_alone, _gather_rows(d_state, closes))
        alone_out, alone_grads = _numpy(forward_and_grads(case, impl, alone, d_alone, chunk_size))
        o, s = alone_out if case.returns_state else (alone_out, None)
        for r, (row, lo, hi) in enumerate(group):
            what = f"{case.name}[{impl} packed vs alone] row {row}, {lo}:{hi}"
            assert_close(out[row:row + 1, lo:hi], o[r:r + 1, :hi - lo], tol, what=f"{what} output")
            if case.returns_state and closes[r] is not None:
                assert_trees_close(_row(state, row), _row(s, r), tol, what=f"{what} final state")
            if not grads:
                continue
            for name in time_inputs:
                assert_close(packed_grads[name][row:row + 1, lo:hi], alone_grads[name][r:r + 1, :hi - lo], tol,
                             kind="grad", what=f"{what} d{name}")
            if state_name is not None and opens[r] is not None:
                assert_trees_close(_row(packed_grads[state_name], row), _row(alone_grads[state_name], r), tol,
                                   kind="grad", what=f"{what} d{state_name}")


def check_decode_equals_forward(case: OpCase, length: int, *, impl: str = "reference", chunk_size: int | None = None,
                                batch: int = 2, seed: int = 0, tol: Tol | None = None, via_vjp: bool = False) -> None:
    """`case.step` looped over T equals the forward through `impl`: every output and the final state.

    via_vjp: read the forward from the path's jitted VJP (`outputs`): free next to a parity check of the same
    shapes (plain rows, same B and chunk size), dearer than a forward compile anywhere else.
    """
    if case.step is None:
        raise ValueError(f"{case.name}: `case.step` is None, expected the op's decode step")
    tol = tolerance(case.name) if tol is None else tol
    inputs = make_case_inputs(case, length, batch=batch, seed=seed)
    forward = outputs(case, impl, inputs, chunk_size) if via_vjp else _path(case, impl, chunk_size)(inputs)
    out, final = forward if case.returns_state else (forward, None)
    shared = {n: v for n, v in inputs.items()
              if n not in case.time_inputs and n not in (case.state_input, "segment_ids")}
    state = case.init_state(inputs) if case.init_state is not None else inputs.get(case.state_input)
    step = jit(case.step)
    per_step = _numpy({n: inputs[n] for n in case.time_inputs})  # numpy: slicing it compiles nothing
    outs = []
    for t in range(length):
        o_t, state = step(**{n: x[:, t] for n, x in per_step.items()}, **shared, state=state)
        outs.append(o_t)
    chex.assert_type(outs[-1], out.dtype)
    assert_close(np.stack(outs, axis=1), out, tol, what=f"{case.name} decode vs forward[{impl}]")
    if case.returns_state:
        assert_trees_close(state, final, tol, what=f"{case.name} decode state vs forward[{impl}]")


# Bad inputs that both delta-rule ops (gated and momentum) reject, against valid inputs with q, k, v
# [1, 8, 1, 4] and gates [1, 8, 1]: (overrides, the argument the ValueError names).
DELTA_RULE_BAD_INPUTS = [
    (dict(q=jnp.zeros((1, 8, 4))), "q"),
    (dict(k=jnp.zeros((1, 8, 1, 5))), "k"),
    (dict(v=jnp.zeros((1, 7, 1, 4))), "v"),
    (dict(beta=jnp.zeros((1, 8))), "beta"),
    (dict(segment_ids=jnp.zeros((1, 9), jnp.int32)), "segment_ids"),
    (dict(segment_ids=jnp.zeros((1, 8), jnp.float32)), "segment_ids"),
    (dict(g=jnp.full((1, 8, 1), 0.1)), "g"),
    (dict(beta=jnp.full((1, 8, 1), 2.5)), "beta"),
]

def check_bad_chunk_size_and_implementation(op: Callable[..., Any], inputs: Inputs) -> None:
    """op(**inputs) raises ValueError for a chunk size outside CHUNK_SIZES and for an unknown implementation."""
    with pytest.raises(ValueError, match="chunk_size"):
        op(**inputs, chunk_size=48)
    with pytest.raises(ValueError, match="unknown implementation"):
        op(**inputs, implementation="triton")


def check_dispatch_never_falls_back(monkeypatch: pytest.MonkeyPatch, api: Any, op: Callable[..., Any],
                                    inputs: Inputs, *, blocked: str, fallback: str) -> None:
    """With `blocked` registered for TPU only, naming it raises; a sequence is tried in order; None picks "xla".

    api: the op's api module (its `_IMPLEMENTATIONS` table and `_select`).
    """
    fn, _ = api._IMPLEMENTATIONS[blocked]
    monkeypatch.setitem(api._IMPLEMENTATIONS, blocked, (fn, ("tpu",)))
    with pytest.raises(RuntimeError, match="cannot run"):
        op(**inputs, implementation=blocked)
    assert api._select((blocked, fallback)) is api._IMPLEMENTATIONS[fallback][0]
    monkeypatch.undo()
    assert api._select(None) is api._IMPLEMENTATIONS["xla"][0]


def _poison(inputs: Inputs, names: Sequence[str], row: int, lo: int, hi: int, value: float) -> Inputs:
    """The inputs with `value` written into positions lo:hi of row `row` of every time input in `names`."""
    poisoned = dict(inputs)
    for name in names:
        x = np.array(inputs[name])  # numpy: an eager `.at[].set` compiles one scatter per shape
        x[row, lo:hi] = value
        poisoned[name] = jnp.asarray(x)
    return poisoned


def _outside(x: jax.Array, row: int, lo: int, hi: int) -> np.ndarray:
    """x `[B, T, ...]` as float64 with positions lo:hi of row `row` zeroed (the poisoned segment left out)."""
    x = np.array(x, np.float64)
    x[row, lo:hi] = 0.0
    return x


def check_nan_segment_isolation(case: OpCase, impl: str, bounds: Bounds, poisoned: tuple[int, int], *,
                                chunk_size: int | None = None, shared: Sequence[str] = (), seed: int = 0,
                                tol: Tol | None = None) -> None:
    """A NaN (then an inf) in one packed segment reaches no other segment's outputs or input gradients.

    `bounds` gives the packed rows; `poisoned = (row, index)` names the segment `bounds[row][index]:
    bounds[row][index + 1]`, which must be neither the first of its row (the initial state's gradient is
    checked) nor the last (the final state is checked). Every float time input gets the bad value at that
    segment's positions, all at once. Forward and VJP run with random cotangents that are finite everywhere,
    the poisoned positions included. Everywhere outside the segment the outputs, the final state, the time
    inputs' gradients and the initial state's gradient must be finite and equal (at `tol`) to the run
    without the bad value.

    `shared` names inputs that every segment reads (a long convolution's filter): their gradients sum over
    all segments, so a NaN in any segment reaches them by definition; they are left out of the gradient check.
    """
    tol = tolerance(case.name) if tol is None else tol
    row, index = poisoned
    lo, hi = bounds[row][index], bounds[row][index + 1]
    if index == 0 or index + 2 >= len(bounds[row]):
        raise ValueError(f"{case.name}: `poisoned` is {poisoned}, expected a segment neither first nor last "
                         f"of row {row} with edges {bounds[row]}")
    inputs = make_case_inputs(case, 0, seed=seed, bounds=bounds)
    floats = [n for n in case.time_inputs
              if inputs.get(n) is not None and jnp.issubdtype(inputs[n].dtype, jnp.floating)]
    shapes = jax.eval_shape(lambda i: case.reference(**i), inputs)
    cotangents = random_cotangents(np.random.default_rng(seed + 1), shapes)
    clean_out, clean_grads = forward_and_grads(case, impl, inputs, cotangents, chunk_size)
    checked = [n for n in case.differentiable if n not in shared and inputs.get(n) is not None]
    for value in (np.nan, np.inf):
        bad = _poison(inputs, floats, row, lo, hi, value)
        out, grads = forward_and_grads(case, impl, bad, cotangents, chunk_size)
        label = f"{case.name}[{impl}] with {value} in row {row}, {lo}:{hi}"
        main, clean_main = (out[0], clean_out[0]) if case.returns_state else (out, clean_out)
        assert_close(_outside(main, row, lo, hi), _outside(clean_main, row, lo, hi), tol, what=f"{label}: output")
        if case.returns_state:
            assert_trees_close(out[1], clean_out[1], tol, what=f"{label}: final state")
        for name in checked:
            cut = (lambda g: _outside(g, row, lo, hi)) if name in case.time_inputs else np.asarray
            assert_trees_close(jax.tree.map(cut, grads[name]), jax.tree.map(cut, clean_grads[name]), tol,
                               kind="grad", what=f"{label}: d{name}")
