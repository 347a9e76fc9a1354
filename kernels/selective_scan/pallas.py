"""Selective scan (Mamba1) as Pallas kernels that keep the state on chip: forward and hand-written backward.

The XLA path materializes the `[B, Q, D_in, N]` states of a chunk; these kernels never write a per-step
state to HBM. One program owns a batch row and a block of channels; its `[N, D_block]` state (N on
sublanes, channels on lanes) is carried across time in registers / VMEM.

- Forward (`_fwd`): the step h <- exp(Δ A) ⊙ where(keep, h, 0) + Δ u B, y = Σ_n h C, one step at a
  time; the state entering every sub-chunk of `tuning.SUBCHUNK` steps is stored (the only residual
  besides the inputs).
- Backward (`_bwd`): sub-chunks in reverse; each recomputes its states from the stored one (held as
  values), then runs the adjoint recurrence g <- where(keep, exp(Δ A) ⊙ g, 0) backwards, producing
  du, dΔ, dA, dB, dC and d(initial state).

Time is organized per platform (`kernels._common.lowering.by_platform`): on GPU (Triton) one program per
(row, channel block) loops over the whole sequence with `lax.fori_loop`; on TPU (Mosaic) a third,
sequential grid axis walks blocks of `t_block` steps and the state lives in the resident output block.
B and C enter transposed (`[B, N, T]`) so a step's column is `[N, 1]` and a step's row of u is `[1, D_block]`.

Segment resets mask the state with `jnp.where` before any product, so a NaN in one packed segment never
reaches another. Operands are cast to float32 first: gates and states are float32 whatever the dtype.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from icml26zoo.kernels._common import lowering
from icml26zoo.kernels._common.segments import segment_starts
from icml26zoo.kernels.selective_scan import tuning
from icml26zoo.kernels.selective_scan.reference import initial, skip

_NAME = "selective_scan"
_S = tuning.SUBCHUNK


def _step(h: jax.Array, a: jax.Array, u: jax.Array, dt: jax.Array, b: jax.Array, c: jax.Array,
          keep: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One step. h, a: [N, Db]; u, dt: [1, Db]; b, c: [N, 1]; keep: [1, 1] (0 at a segment start).

    Returns the new state [N, Db] and y [1, Db].
    """
    kept = jnp.where(keep > 0.5, h, 0.0)
    h = jnp.exp(dt * a) * kept + (dt * u) * b
    return h, jnp.sum(h * c, axis=0, keepdims=True)


def _step_bwd(g: jax.Array, h_prev: jax.Array, h: jax.Array, a: jax.Array, u: jax.Array, dt: jax.Array,
              b: jax.Array, c: jax.Array, keep: jax.Array, gy: jax.Array) -> tuple[jax.Array, ...]:
    """Reverse of `_step` from h_prev to h, for dL/dh = g [N, Db] (from later steps) and dL/dy = gy [1, Db].

    Returns dL/dh_prev [N, Db], du and dΔ [1, Db], dB and dC [N, 1] (this block's channels only) and
    this step's share of dA [N, Db].
    """
    g = g + c * gy
    kept = jnp.where(keep > 0.5, h_prev, 0.0)
    decay = jnp.exp(dt * a)
    d_log_decay = g * kept * decay
    d_dt_u = jnp.sum(g * b, axis=0, keepdims=True)
    d_dt = d_dt_u * u + jnp.sum(d_log_decay * a, axis=0, keepdims=True)
    db = jnp.sum(g * (dt * u), axis=1, keepdims=True)
    dc = jnp.sum(h * gy, axis=1, keepdims=True)
    g_prev = jnp.where(keep > 0.5, g * decay, 0.0)
    return g_prev, d_dt_u * dt, d_dt, db, dc, d_log_decay * dt


def _row(ref: Any, t: Any) -> jax.Array:
    """Step t of a `[L, Db]` block: `[1, Db]`."""
    return ref[pl.ds(t, 1), :]


def _col(ref: Any, t: Any) -> jax.Array:
    """Step t of a `[N, L]` block: `[N, 1]`."""
    return ref[:, pl.ds(t, 1)]


def _loop(n: int, static: bool, body: Callable[[Any, Any], Any], carry: Any, reverse: bool = False) -> Any:
    """body(k, carry) for k in 0..n-1 (or n-1..0): unrolled when `static` (TPU: static offsets), else fori_loop."""
    order = (lambda i: n - 1 - i) if reverse else (lambda i: i)
    if static:
        for i in range(n):
            carry = body(order(i), carry)
        return carry
    return lax.fori_loop(0, n, lambda i, c: body(order(i), c), carry)


def _load_steps(ins: Sequence[Any], base: Any) -> list[tuple[jax.Array, ...]]:
    """(u, Δ, b, c, keep) of the sub-chunk's steps base..base+S-1."""
    u_ref, dt_ref, b_ref, c_ref, keep_ref = ins
    return [(_row(u_ref, base + j), _row(dt_ref, base + j), _col(b_ref, base + j), _col(c_ref, base + j),
             _col(keep_ref, base + j)) for j in range(_S)]


def _forward_span(ins: Sequence[Any], a: jax.Array, y_ref: Any, hs_ref: Any, h: jax.Array,
                  static: bool) -> jax.Array:
    """The steps of this program's time block (`[L, Db]` refs), storing every sub-chunk's entering state."""

    def subchunk(k: Any, h: jax.Array) -> jax.Array:
        hs_ref[k] = h
        for j, step_in in enumerate(_load_steps(ins, k * _S)):
            h, y = _step(h, a, *step_in)
            y_ref[pl.ds(k * _S + j, 1), :] = y
        return h

    return _loop(y_ref.shape[0] // _S, static, subchunk, h)


def _forward_kernel(u_ref: Any, dt_ref: Any, b_ref: Any, c_ref: Any, keep_ref: Any, a_ref: Any, h0_ref: Any,
                    y_ref: Any, hs_ref: Any, hf_ref: Any, *, tpu: bool) -> None:
    """One (row, channel block); on TPU one time block of it, the state carried in the resident `hf_ref`."""
    ins = (u_ref, dt_ref, b_ref, c_ref, keep_ref)
    if not tpu:
        hf_ref[...] = _forward_span(ins, a_ref[...], y_ref, hs_ref, h0_ref[...], static=False)
        return

    @pl.when(pl.program_id(2) == 0)
    def _start() -> None:
        hf_ref[...] = h0_ref[...]

    hf_ref[...] = _forward_span(ins, a_ref[...], y_ref, hs_ref, hf_ref[...], static=True)


def _backward_span(ins: Sequence[Any], a: jax.Array, hs_ref: Any, gy_ref: Any, outs: Sequence[Any],
                   g: jax.Array, da: jax.Array, static: bool) -> tuple[jax.Array, jax.Array]:
    """Sub-chunks of this time block in reverse: recompute their states, then the adjoint steps."""
    du_ref, ddt_ref, db_ref, dc_ref = outs

    def subchunk(k: Any, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        g, da = carry
        base = k * _S
        steps = _load_steps(ins, base)
        states = [hs_ref[k]]
        for step_in in steps:
            states.append(_step(states[-1], a, *step_in)[0])
        for j in reversed(range(_S)):
            g, du, d_dt, db, dc, da_t = _step_bwd(g, states[j], states[j + 1], a, *steps[j], _row(gy_ref, base + j))
            du_ref[pl.ds(base + j, 1), :] = du
            ddt_ref[pl.ds(base + j, 1), :] = d_dt
            db_ref[:, pl.ds(base + j, 1)] = db
            dc_ref[:, pl.ds(base + j, 1)] = dc
            da = da + da_t
        return g, da

    return _loop(gy_ref.shape[0] // _S, static, subchunk, (g, da), reverse=True)


def _backward_kernel(u_ref: Any, dt_ref: Any, b_ref: Any, c_ref: Any, keep_ref: Any, a_ref: Any, hs_ref: Any,
                     gy_ref: Any, ghf_ref: Any, du_ref: Any, ddt_ref: Any, db_ref: Any, dc_ref: Any, da_ref: Any,
                     dh0_ref: Any, *, tpu: bool) -> None:
    """One (row, channel block), time reversed; on TPU dL/dh and dA are carried in resident output blocks."""
    ins = (u_ref, dt_ref, b_ref, c_ref, keep_ref)
    outs = (du_ref, ddt_ref, db_ref, dc_ref)
    if not tpu:
        g, da = _backward_span(ins, a_ref[...], hs_ref, gy_ref, outs, ghf_ref[...],
                               jnp.zeros(da_ref.shape, jnp.float32), static=False)
    else:
        @pl.when(pl.program_id(2) == 0)
        def _start() -> None:
            dh0_ref[...] = ghf_ref[...]
            da_ref[...] = jnp.zeros(da_ref.shape, jnp.float32)

        g, da = _backward_span(ins, a_ref[...], hs_ref, gy_ref, outs, dh0_ref[...], da_ref[...], static=True)
    dh0_ref[...] = g
    da_ref[...] = da


@dataclasses.dataclass(frozen=True)
class _Layout:
    """One mode's blocking of operands with N states, D_in channels and Tp (padded) steps."""

    tpu: bool
    blocks: tuning.ScanBlocks
    n: int  # N, padded to a power of two on GPU
    d_pad: int  # D_in, padded to a multiple of d_block
    d_block: int
    steps: int  # Tp
    t_len: int  # steps per program (GPU: all of Tp)

    @property
    def grid(self) -> tuple[int, ...]:
        lead = (self.d_pad // self.d_block,)
        return lead + ((self.steps // self.t_len,) if self.tpu else ())


def _next_pow2(x: int) -> int:
    return 1 << max(x - 1, 0).bit_length()


def _layout(mode: lowering.Mode, dtype: str, n: int, d_in: int, steps: int) -> _Layout:
    tpu = lowering.is_tpu_layout(mode)
    blocks = tuning.block_sizes("tpu" if tpu else "gpu", jnp.dtype(dtype))
    if tpu:
        d_block = d_in if d_in <= blocks.d_block else blocks.d_block
        t_len = steps if steps <= blocks.t_block else (blocks.t_block if steps % blocks.t_block == 0
                                                       else tuning.LONG_PAD)
        n_pad = n
    else:
        d_block = min(blocks.d_block, _next_pow2(d_in))
        t_len, n_pad = steps, _next_pow2(n)
    d_pad = -(-d_in // d_block) * d_block
    return _Layout(tpu, blocks, n_pad, d_pad, d_block, steps, t_len)


def _specs(lay: _Layout, reverse: bool) -> dict[str, pl.BlockSpec]:
    """BlockSpecs by operand kind; index maps take (b, d) on GPU and (b, d, time block) on TPU."""
    n_t = lay.steps // lay.t_len
    time = lambda c: (0 if not c else (n_t - 1 - c[0] if reverse else c[0]))
    sq = pl.squeezed
    return {
        "seq": pl.BlockSpec((sq, lay.t_len, lay.d_block), lambda b, d, *c: (b, time(c), d)),
        "cols": pl.BlockSpec((sq, lay.n, lay.t_len), lambda b, d, *c: (b, 0, time(c))),
        "keep": pl.BlockSpec((sq, 1, lay.t_len), lambda b, d, *c: (b, 0, time(c))),
        "a": pl.BlockSpec((lay.n, lay.d_block), lambda b, d, *c: (0, d)),
        "state": pl.BlockSpec((sq, lay.n, lay.d_block), lambda b, d, *c: (b, 0, d)),
        "states": pl.BlockSpec((sq, lay.t_len // _S, lay.n, lay.d_block), lambda b, d, *c: (b, time(c), 0, d)),
        "partial_cols": pl.BlockSpec((sq, sq, lay.n, lay.t_len), lambda b, d, *c: (b, d, 0, time(c))),
    }


def _pad_to(x: jax.Array, shape: Sequence[int]) -> jax.Array:
    return jnp.pad(x, [(0, want - have) for have, want in zip(x.shape, shape, strict=True)])


def _call(mode: lowering.Mode, lay: _Layout, kernel: Callable[..., None], bsz: int, in_specs: list[pl.BlockSpec],
          out_specs: list[pl.BlockSpec], out_shape: list[jax.ShapeDtypeStruct]) -> Callable[..., Any]:
    semantics = ("parallel", "parallel", "arbitrary")
    return pl.pallas_call(
        functools.partial(kernel, tpu=lay.tpu), grid=(bsz,) + lay.grid, in_specs=in_specs, out_specs=out_specs,
        out_shape=out_shape, interpret=lowering.interpret_arg(mode),
        compiler_params=lowering.compiler_params(mode, num_warps=lay.blocks.num_warps,
                                                 num_stages=lay.blocks.num_stages, dimension_semantics=semantics))


def _forward_builder(dtype: str) -> Callable[[lowering.Mode], Callable[..., tuple[jax.Array, ...]]]:
    """build(mode) for `by_platform`: prepared operands -> (y [B, Tp, D], states [B, Tp/S, N, D], final [B, N, D])."""

    def build(mode: lowering.Mode) -> Callable[..., tuple[jax.Array, ...]]:
        def run(u: jax.Array, dt: jax.Array, bt: jax.Array, ct: jax.Array, keep: jax.Array, at: jax.Array,
                h0: jax.Array) -> tuple[jax.Array, ...]:
            bsz, steps, d_in = u.shape
            n = at.shape[0]
            lay = _layout(mode, dtype, n, d_in, steps)
            seq, cols = (bsz, steps, lay.d_pad), (bsz, lay.n, steps)
            state = (bsz, lay.n, lay.d_pad)
            sp = _specs(lay, reverse=False)
            f32 = lambda shape: jax.ShapeDtypeStruct(shape, jnp.float32)
            y, hs, hf = _call(mode, lay, _forward_kernel, bsz,
                              [sp["seq"], sp["seq"], sp["cols"], sp["cols"], sp["keep"], sp["a"], sp["state"]],
                              [sp["seq"], sp["states"], sp["state"]],
                              [f32(seq), f32((bsz, steps // _S) + state[1:]), f32(state)])(
                _pad_to(u, seq), _pad_to(dt, seq), _pad_to(bt, cols), _pad_to(ct, cols), keep,
                _pad_to(at, state[1:]), _pad_to(h0, state))
            return y[..., :d_in], hs[:, :, :n, :d_in], hf[:, :n, :d_in]

        return run

    return build


def _backward_builder(dtype: str) -> Callable[[lowering.Mode], Callable[..., tuple[jax.Array, ...]]]:
    """build(mode) for `by_platform`: operands, stored states and cotangents -> (du, dΔ, dB^T, dC^T, dA^T, dh0)."""

    def build(mode: lowering.Mode) -> Callable[..., tuple[jax.Array, ...]]:
        def run(u: jax.Array, dt: jax.Array, bt: jax.Array, ct: jax.Array, keep: jax.Array, at: jax.Array,
                hs: jax.Array, gy: jax.Array, ghf: jax.Array) -> tuple[jax.Array, ...]:
            bsz, steps, d_in = u.shape
            n = at.shape[0]
            lay = _layout(mode, dtype, n, d_in, steps)
            seq, cols = (bsz, steps, lay.d_pad), (bsz, lay.n, steps)
            state = (bsz, lay.n, lay.d_pad)
            partial_cols = (bsz, lay.d_pad // lay.d_block, lay.n, steps)
            sp = _specs(lay, reverse=True)
            f32 = lambda shape: jax.ShapeDtypeStruct(shape, jnp.float32)
            du, ddt, dbt, dct, dat, dh0 = _call(
                mode, lay, _backward_kernel, bsz,
                [sp["seq"], sp["seq"], sp["cols"], sp["cols"], sp["keep"], sp["a"], sp["states"], sp["seq"],
                 sp["state"]],
                [sp["seq"], sp["seq"], sp["partial_cols"], sp["partial_cols"], sp["state"], sp["state"]],
                [f32(seq), f32(seq), f32(partial_cols), f32(partial_cols), f32(state), f32(state)])(
                _pad_to(u, seq), _pad_to(dt, seq), _pad_to(bt, cols), _pad_to(ct, cols), keep,
                _pad_to(at, state[1:]), _pad_to(hs, (bsz, steps // _S) + state[1:]), _pad_to(gy, seq),
                _pad_to(ghf, state))
            # dB, dC: each channel block's share, summed; dA: each row's share, summed.
            return (du[..., :d_in], ddt[..., :d_in], jnp.sum(dbt, axis=1)[:, :n], jnp.sum(dct, axis=1)[:, :n],
                    jnp.sum(dat, axis=0)[:n, :d_in], dh0[:, :n, :d_in])

        return run

    return build


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _scan(u: jax.Array, dt: jax.Array, bt: jax.Array, ct: jax.Array, keep: jax.Array, at: jax.Array,
          h0: jax.Array, dtype: str) -> tuple[jax.Array, jax.Array]:
    """Prepared float32 operands: u, dt [B, Tp, D]; bt, ct [B, N, Tp]; keep [B, 1, Tp]; at [N, D] (A^T);
    h0 [B, N, D]. `dtype`: the input dtype's name (picks the block sizes). Returns y [B, Tp, D] (no D skip)
    and the final state [B, N, D]."""
    y, _, hf = _fwd(u, dt, bt, ct, keep, at, h0, dtype)[0]
    return y, hf


def _fwd(u: jax.Array, dt: jax.Array, bt: jax.Array, ct: jax.Array, keep: jax.Array, at: jax.Array, h0: jax.Array,
         dtype: str) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    y, hs, hf = lowering.by_platform(_NAME, _forward_builder(dtype), u, dt, bt, ct, keep, at, h0)
    return (y, hs, hf), (u, dt, bt, ct, keep, at, hs)


def _scan_fwd(u: jax.Array, dt: jax.Array, bt: jax.Array, ct: jax.Array, keep: jax.Array, at: jax.Array,
              h0: jax.Array, dtype: str) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, ...]]:
    (y, _, hf), res = _fwd(u, dt, bt, ct, keep, at, h0, dtype)
    return (y, hf), res


def _bwd(dtype: str, res: tuple[jax.Array, ...], cts: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, ...]:
    u, dt, bt, ct, keep, at, hs = res
    gy, ghf = cts
    du, ddt, dbt, dct, dat, dh0 = lowering.by_platform(_NAME, _backward_builder(dtype), u, dt, bt, ct, keep, at,
                                                       hs, gy, ghf)
    return du, ddt, dbt, dct, jnp.zeros_like(keep), dat, dh0


_scan.defvjp(_scan_fwd, _bwd)


def selective_scan(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, *,
                   D: jax.Array | None = None, initial_state: jax.Array | None = None,
                   segment_ids: jax.Array | None = None, chunk_size: int = 64) -> tuple[jax.Array, jax.Array]:
    """Selective scan through the Pallas kernels (chunk_size is accepted for a uniform signature and
    ignored: the kernels' blocks come from `tuning.py`).

    u, delta: [B, T, D_in]; A: [D_in, N] (< 0); B, C: [B, T, N]; D: [D_in] | None;
    initial_state: [B, D_in, N] | None; segment_ids: [B, T] int | None.
    Returns y [B, T, D_in] in u.dtype and the final state [B, D_in, N] float32 (of each row's last segment).
    """
    del chunk_size
    return _selective_scan(u, delta, A, B, C, D, initial_state, segment_ids, lowering.cpu_mode())


# `cpu_mode` is a static argument only so that jit's cache tells the generic and the TPU-interpreted CPU
# branches apart: `by_platform` reads the mode while tracing, which a cached trace would skip.
@functools.partial(jax.jit, static_argnames=("cpu_mode",))
def _selective_scan(u: jax.Array, delta: jax.Array, A: jax.Array, B: jax.Array, C: jax.Array, D: jax.Array | None,
                    initial_state: jax.Array | None, segment_ids: jax.Array | None,
                    cpu_mode: lowering.Mode) -> tuple[jax.Array, jax.Array]:
    del cpu_mode
    bsz, seqlen, d_in = u.shape
    n = A.shape[-1]
    pad = tuning.padded_length(seqlen) - seqlen
    # Padding steps are identities: Δ = 0 (decay 1, no input) and no reset.
    time_pad = lambda z: jnp.pad(z.astype(jnp.float32), ((0, 0), (0, pad), (0, 0)))
    transposed = lambda z: jnp.swapaxes(time_pad(z), 1, 2)
    keep = 1.0 - segment_starts(segment_ids, bsz, seqlen).astype(jnp.float32)
    keep = jnp.pad(keep, ((0, 0), (0, pad)), constant_values=1.0)[:, None, :]
    h0 = jnp.swapaxes(initial(initial_state, bsz, d_in, n), 1, 2)
    y, hf = _scan(time_pad(u), time_pad(delta), transposed(B), transposed(C), keep, A.astype(jnp.float32).T, h0,
                  jnp.dtype(u.dtype).name)
    return skip(y[:, :seqlen], u, D).astype(u.dtype), jnp.swapaxes(hf, 1, 2)
