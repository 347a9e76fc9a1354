"""Pallas kernels for the chunked momentum delta rule: forward and hand-written backward, `jax.custom_vjp`.

Split of work (the maths is `xla.py`'s chunked form):
- XLA (`xla.prepare` and `xla.intra_chunk`, differentiated by plain autodiff): casting, padding,
  chunking, the masked decay factors, the factored coefficient matrix Gam = L_A diag(beta) L_U (a product
  of two triangular factors with entries in [0, 1], never a difference of cumulants, see
  docs/numerics.md) and the UT inverse (I + L)^{-1}. All of these are pure functions of one chunk and run
  for every chunk at once.
- Pallas (`_fwd_kernel`, `_bwd_kernel`), one program per (batch, head) (`kernels._common.pallas.call`): the
  sequential part. Chunk by chunk, with (S, M) the states entering it,

      W   = u - ys S + zm M                    (residuals of the UT system)
      O   = x W + qa S - qb M
      S'  = ea S - b M + k_s^T W
      M'  = eu M - k_m^T W

  The forward saves the states entering every chunk; the backward walks the chunks in reverse carrying
  (dS, dM) and returns the cotangents of every per-chunk operand and of (S0, M0) (derivation in
  `_bwd_chunk`). Gradients w.r.t. q, k, v, p and the gates then flow through the XLA part by autodiff.

Packed segments need nothing here: a reset zeroes every factor linking a step to an earlier segment and the
carried-in terms (qa, qb, ys, zm and the chunk-end decays) in the XLA part, exactly as a zeroed (S, M).

Lowering (`kernels._common.pallas.call`): interpreted on CPU, Triton on CUDA, Mosaic on TPU, chosen when
lowered. The kernels are whole-block matmuls with only the chunk axis indexed dynamically, and loop over
the true chunk count, so Triton's power-of-two zero padding of the trailing dims is inert.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from icml26zoo.kernels._common.pallas import call, dot, shape_dtype, state_pass_tuning
from icml26zoo.kernels._common.precision import HIGHEST
from icml26zoo.kernels.momentum_delta_rule import xla

_OP = "momentum_delta_rule"


def _dot_tn(a: jax.Array, b: jax.Array) -> jax.Array:
    """a^T b, contracting the leading (chunk-row) axis of both."""
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())), precision=HIGHEST, preferred_element_type=jnp.float32)


def _dot_nt(a: jax.Array, b: jax.Array) -> jax.Array:
    """a b^T, contracting the trailing axis of both."""
    return lax.dot_general(a, b, (((1,), (1,)), ((), ())), precision=HIGHEST, preferred_element_type=jnp.float32)


def _load(refs: Sequence[Any], n: jax.Array) -> tuple[jax.Array, ...]:
    """One chunk's operands: x [C,C]; u [C,V]; ys, zm, qa, qb, k_s, k_m [C,K]; ea, b, eu [1]."""
    return tuple(r[n] for r in refs)


def _residuals(u: jax.Array, ys: jax.Array, zm: jax.Array, s: jax.Array, m: jax.Array) -> jax.Array:
    """W [C, V] from the states (S, M) [K, V] entering the chunk."""
    return u - dot(ys, s) + dot(zm, m)


def _fwd_kernel(x_ref: Any, u_ref: Any, ys_ref: Any, zm_ref: Any, qa_ref: Any, qb_ref: Any, ks_ref: Any,
                km_ref: Any, ea_ref: Any, b_ref: Any, eu_ref: Any, s0_ref: Any, m0_ref: Any, o_ref: Any,
                sin_ref: Any, min_ref: Any, sf_ref: Any, mf_ref: Any, *, n_chunks: int) -> None:
    """One (batch, head): chunks in order, states S, M [K, V] carried in registers."""
    in_refs = (x_ref, u_ref, ys_ref, zm_ref, qa_ref, qb_ref, ks_ref, km_ref, ea_ref, b_ref, eu_ref)

    def body(n: jax.Array, state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        s, m = state
        x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu = _load(in_refs, n)
        w = _residuals(u, ys, zm, s, m)
        o_ref[n] = dot(x, w) + dot(qa, s) - dot(qb, m)
        sin_ref[n] = s
        min_ref[n] = m
        s_out = ea[:, None] * s - b[:, None] * m + _dot_tn(k_s, w)
        m_out = eu[:, None] * m - _dot_tn(k_m, w)
        return s_out, m_out

    s_final, m_final = lax.fori_loop(0, n_chunks, body, (s0_ref[...], m0_ref[...]))
    sf_ref[...] = s_final
    mf_ref[...] = m_final


def _bwd_chunk(x: jax.Array, u: jax.Array, ys: jax.Array, zm: jax.Array, qa: jax.Array, qb: jax.Array, k_s: jax.Array,
               k_m: jax.Array, ea: jax.Array, b: jax.Array, eu: jax.Array, s: jax.Array, m: jax.Array, do: jax.Array,
               ds: jax.Array, dm: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
    """Backward of one chunk, by hand from the four forward lines (module docstring).

    Given do [C,V] and (ds, dm) = dL/d(S', M') [K,V], returns the cotangents of the chunk's operands in
    `_load` order and (dS, dM) of the states entering the chunk.
    """
    w = _residuals(u, ys, zm, s, m)
    # W feeds O (through x), S' (through k_s) and M' (through -k_m).
    dw = _dot_tn(x, do) + dot(k_s, ds) - dot(k_m, dm)
    # The chunk-end decays scale whole states: their cotangents are Frobenius products, shape [1].
    frob = lambda a, c: jnp.sum(a * c).reshape(1)
    dx, dqa, dqb = _dot_nt(do, w), _dot_nt(do, s), -_dot_nt(do, m)
    du, dys, dzm = dw, -_dot_nt(dw, s), _dot_nt(dw, m)
    dks, dkm = _dot_nt(w, ds), -_dot_nt(w, dm)
    grads = (dx, du, dys, dzm, dqa, dqb, dks, dkm, frob(ds, s), -frob(ds, m), frob(dm, m))
    ds_in = ea[:, None] * ds + _dot_tn(qa, do) - _dot_tn(ys, dw)
    dm_in = eu[:, None] * dm - b[:, None] * ds - _dot_tn(qb, do) + _dot_tn(zm, dw)
    return grads, ds_in, dm_in


def _bwd_kernel(x_ref: Any, u_ref: Any, ys_ref: Any, zm_ref: Any, qa_ref: Any, qb_ref: Any, ks_ref: Any,
                km_ref: Any, ea_ref: Any, b_ref: Any, eu_ref: Any, sin_ref: Any, min_ref: Any, do_ref: Any,
                dsf_ref: Any, dmf_ref: Any, dx_ref: Any, du_ref: Any, dys_ref: Any, dzm_ref: Any, dqa_ref: Any,
                dqb_ref: Any, dks_ref: Any, dkm_ref: Any, dea_ref: Any, db_ref: Any, deu_ref: Any, ds0_ref: Any,
                dm0_ref: Any, *, n_chunks: int) -> None:
    """One (batch, head): chunks in reverse, (dS, dM) carried."""
    in_refs = (x_ref, u_ref, ys_ref, zm_ref, qa_ref, qb_ref, ks_ref, km_ref, ea_ref, b_ref, eu_ref,
               sin_ref, min_ref, do_ref)
    out_refs = (dx_ref, du_ref, dys_ref, dzm_ref, dqa_ref, dqb_ref, dks_ref, dkm_ref, dea_ref, db_ref, deu_ref)

    def body(j: jax.Array, cot: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        n = n_chunks - 1 - j
        grads, ds_in, dm_in = _bwd_chunk(*_load(in_refs, n), *cot)
        for ref, val in zip(out_refs, grads, strict=True):
            ref[n] = val
        return ds_in, dm_in

    ds0, dm0 = lax.fori_loop(0, n_chunks, body, (dsf_ref[...], dmf_ref[...]))
    ds0_ref[...] = ds0
    dm0_ref[...] = dm0


@jax.custom_vjp
def state_pass(x: jax.Array, u: jax.Array, ys: jax.Array, zm: jax.Array, qa: jax.Array, qb: jax.Array,
               k_s: jax.Array, k_m: jax.Array, ea: jax.Array, b: jax.Array, eu: jax.Array, s0: jax.Array,
               m0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The sequential part on per-chunk operands ([B,H,N,...], see `xla.Intra`; ea, b, eu [B,H,N,1]).

    Returns o [B,H,N,C,V] and the final states S, M [B,H,K,V].
    """
    return _state_pass_fwd(x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s0, m0)[0]


def _state_pass_fwd(x: jax.Array, u: jax.Array, ys: jax.Array, zm: jax.Array, qa: jax.Array, qb: jax.Array,
                    k_s: jax.Array, k_m: jax.Array, ea: jax.Array, b: jax.Array, eu: jax.Array, s0: jax.Array,
                    m0: jax.Array) -> tuple[tuple[jax.Array, jax.Array, jax.Array], tuple[jax.Array, ...]]:
    inputs = (x, u, ys, zm, qa, qb, k_s, k_m, ea, b, eu, s0, m0)
    per_chunk_state = x.shape[:3] + s0.shape[2:]
    outs = (shape_dtype(u), shape_dtype(s0, per_chunk_state), shape_dtype(m0, per_chunk_state), shape_dtype(s0),
            shape_dtype(m0))
    kernel = functools.partial(_fwd_kernel, n_chunks=x.shape[2])
    o, s_in, m_in, s_final, m_final = call(_OP, kernel, inputs, outs, state_pass_tuning)
    return (o, s_final, m_final), inputs[:11] + (s_in, m_in)


def _state_pass_bwd(res: tuple[jax.Array, ...], cts: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    do, dsf, dmf = cts
    inputs = res + (do, dsf, dmf)
    outs = tuple(shape_dtype(a) for a in res[:11]) + (shape_dtype(dsf), shape_dtype(dmf))
    kernel = functools.partial(_bwd_kernel, n_chunks=do.shape[2])
    return tuple(call(_OP, kernel, inputs, outs, state_pass_tuning))


state_pass.defvjp(_state_pass_fwd, _state_pass_bwd)


def _heads_first_pass(it: xla.Intra, s0: jax.Array, m0: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """The Pallas state pass on [B, H, N, ...] operands: o [B, N*C, H, V], (S, M) [B, H, K, V]."""
    bsz, heads = s0.shape[:2]
    ends = tuple(it.ends[..., i:i + 1] for i in range(3))  # [B,H,N,1] each: exp(A_C), b_C, exp(U_C)
    o, s_final, m_final = state_pass(it.x, it.u, it.ys, it.zm, it.qa, it.qb, it.k_s, it.k_m, *ends, s0, m0)
    o = jnp.moveaxis(o, 1, 3).reshape(bsz, -1, heads, o.shape[-1])
    return o, (s_final, m_final)


momentum_delta_rule = xla.chunked_op(
    _heads_first_pass, chunk_major=False,
    summary=("Pallas chunked momentum delta rule (interpreted on CPU, Triton on GPU, Mosaic on TPU); same contract "
             "as `xla.momentum_delta_rule`."))
