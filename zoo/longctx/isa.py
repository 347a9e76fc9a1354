"""ISA, in-context sparse attention (Shao et al., ICML 2026, arXiv 2605.04569).

Bidirectional attention over `[source part ; context part]` (N = n_src + n_ctx tokens; see
`icml26zoo.longctx.isa_plan` for the naming map to the paper's code):

1. pooled attention between block means decides which context blocks every query may see (the top
   `ctx_keep` fraction by the pooled mass they receive from source-part queries): the pruned keys K';
2. the query blocks whose pooled attention on the source blocks is sharpest (the first `full_frac` of
   them) attend exactly over K';
3. every other query block takes the 0-th-order Taylor sparse path over K': `exact_frac` of K's blocks
   (ranked by (Σ q)·(Σ k)) exactly, the rest through one logit per block, q·k̂_J/√D + log b, with the block
   mean value (e^{q·k_j} ≈ e^{q·k̂_J} for every key of the block);
4. optionally a gated residual of the pooled output, `o += g ⊙ O_pool`, the only route from a pruned
   context token to any query.

Written from the paper's code (algorithm and constants, read for the maths); the static-shape design is the
spec's reconstruction. Deviations: the sequence length must be a multiple of `block` and `n_src` too (the
"clean" variant without padding; the code's zero-padding variant is not reproduced); MHA only (q, k, v with
the same heads); selection indices carry no gradient, as in the paper's backward; one stable softmax over
the concatenated exact and block logits instead of the kernel's streaming.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from icml26zoo.longctx.isa_plan import (
    OP,
    IsaPlan,
    IsaSizes,
    from_blocks,
    gather_blocks,
    isa_plan,
    isa_sizes,
    pruned_keys,
    to_blocks,
)


def _check_inputs(q: jax.Array, k: jax.Array, v: jax.Array, gate: jax.Array | None) -> None:
    if q.ndim != 4:
        raise ValueError(f"{OP}: `q` has shape {q.shape}, expected [B, N, H, D]")
    for name, x in (("k", k), ("v", v)):
        if x.shape != q.shape:
            raise ValueError(f"{OP}: `{name}` has shape {x.shape}, expected q.shape = {q.shape} (MHA only)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{OP}: `{name}` has dtype {x.dtype}, expected a floating dtype")
    if gate is not None and gate.shape != q.shape[:2]:
        raise ValueError(f"{OP}: `gate` has shape {gate.shape}, expected {q.shape[:2]} = [B, N]")


def _softmax_values(logits: jax.Array, values: jax.Array) -> jax.Array:
    """Σ_j softmax(logits)_j values_j: logits [..., b, T], values [..., T, D] -> [..., b, D]."""
    return jnp.einsum("...it,...td->...id", jax.nn.softmax(logits, axis=-1), values)


def full_path(q_full: jax.Array, k_pruned: jax.Array, v_pruned: jax.Array) -> jax.Array:
    """Exact attention of q blocks [B, H, F, b, D] over K', V' blocks [B, H, NB', b, D] -> [B, H, F, b, D]."""
    b, h, nbp, blk, d = k_pruned.shape
    keys = k_pruned.reshape(b, h, 1, nbp * blk, d).astype(jnp.float32)
    values = v_pruned.reshape(b, h, 1, nbp * blk, d).astype(jnp.float32)
    logits = jnp.einsum("bhfid,bhftd->bhfit", q_full.astype(jnp.float32), keys) / math.sqrt(d)
    return _softmax_values(logits, values)


def exact_block_ids(q_sparse: jax.Array, k_pruned: jax.Array, n_exact: int) -> jax.Array:
    """[B, H, S, k_e]: per sparse query block, the K' blocks with the largest (Σ_i q_i)·(Σ_j k_j)."""
    scores = jnp.einsum("bhsd,bhjd->bhsj", q_sparse.astype(jnp.float32).sum(3), k_pruned.astype(jnp.float32).sum(3))
    return jax.lax.top_k(jax.lax.stop_gradient(scores), n_exact)[1]


def sparse_path(q_sparse: jax.Array, k_pruned: jax.Array, v_pruned: jax.Array, exact_ids: jax.Array) -> jax.Array:
    """0-th-order Taylor sparse attention of q blocks [B, H, S, b, D] over K', V' [B, H, NB', b, D].

    Exact tokens of the blocks `exact_ids` [B, H, S, k_e]; every other block J enters as one logit
    q·k̂_J/√D + log b with value v̄_J (the paper's sparse path). Returns [B, H, S, b, D].
    """
    b, h, s, blk, d = q_sparse.shape
    nbp = k_pruned.shape[2]
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q_sparse, k_pruned, v_pruned))
    ids = exact_ids[..., None, None]
    exact_k = jnp.take_along_axis(k32[:, :, None], ids, axis=3).reshape(b, h, s, -1, d)
    exact_v = jnp.take_along_axis(v32[:, :, None], ids, axis=3).reshape(b, h, s, -1, d)
    exact_logits = jnp.einsum("bhsid,bhstd->bhsit", q32, exact_k) / math.sqrt(d)
    is_exact = jax.nn.one_hot(exact_ids, nbp, dtype=jnp.bool_).any(axis=-2)
    block_logits = jnp.einsum("bhsid,bhjd->bhsij", q32, k32.mean(3)) / math.sqrt(d) + math.log(blk)
    block_logits = jnp.where(is_exact[:, :, :, None, :], -jnp.inf, block_logits)
    block_values = jnp.broadcast_to(v32.mean(3)[:, :, None], (b, h, s, nbp, d))
    logits = jnp.concatenate([exact_logits, block_logits], axis=-1)
    return _softmax_values(logits, jnp.concatenate([exact_v, block_values], axis=-2))


def isa_attention_and_plan(q: jax.Array, k: jax.Array, v: jax.Array, n_src: int, *, block: int = 64,
                           ctx_keep: float = 1 / 8, full_frac: float = 1 / 2, exact_frac: float = 1 / 16,
                           gate: jax.Array | None = None) -> tuple[jax.Array, IsaPlan, IsaSizes]:
    """`isa_attention`, also returning its plan (pooled attention, kept blocks, routing order) and sizes."""
    _check_inputs(q, k, v, gate)
    sizes = isa_sizes(q.shape[1], n_src, block, ctx_keep, full_frac, exact_frac)
    qb, kb, vb = (to_blocks(x, block) for x in (q, k, v))
    plan = isa_plan(qb, kb, vb, sizes)
    k_pruned, v_pruned = pruned_keys(kb, vb, plan, sizes)
    full_ids, sparse_ids = plan.order[..., : sizes.n_full], plan.order[..., sizes.n_full :]
    outs = [full_path(gather_blocks(qb, full_ids), k_pruned, v_pruned)]
    if sizes.n_full < sizes.n_blocks:
        q_sparse = gather_blocks(qb, sparse_ids)
        exact_ids = exact_block_ids(q_sparse, k_pruned, sizes.n_exact)
        outs.append(sparse_path(q_sparse, k_pruned, v_pruned, exact_ids))
    routed = jnp.concatenate(outs, axis=2)
    out_blocks = gather_blocks(routed, jnp.argsort(plan.order, axis=-1))
    if gate is not None:
        gate_blocks = gate.astype(jnp.float32).reshape(q.shape[0], 1, sizes.n_blocks, block, 1)
        out_blocks = out_blocks + gate_blocks * plan.pooled_out[:, :, :, None]
    return from_blocks(out_blocks).astype(q.dtype), plan, sizes


def isa_attention(q: jax.Array, k: jax.Array, v: jax.Array, n_src: int, *, block: int = 64,
                  ctx_keep: float = 1 / 8, full_frac: float = 1 / 2, exact_frac: float = 1 / 16,
                  gate: jax.Array | None = None) -> jax.Array:
    """ISA over q, k, v [B, N, H, D] (after QK-norm and RoPE), the first `n_src` tokens being the source part.

    block: tokens per block (divides N and n_src); ctx_keep ∈ [0, 1]: fraction of context blocks kept;
    full_frac ∈ [0, 1]: fraction of query blocks on the full path; exact_frac ∈ (0, 1]: the spec's σ (exact
    K' blocks per sparse query block and the top source columns of the sharpness); gate: None (no pooled
    residual) or g [B, N] (see `isa_gate`). ctx_keep = full_frac = 1 without gate is dense attention.
    Returns [B, N, H, D] in q's dtype; all scores in float32.
    """
    return isa_attention_and_plan(q, k, v, n_src, block=block, ctx_keep=ctx_keep, full_frac=full_frac,
                                  exact_frac=exact_frac, gate=gate)[0]


def isa_gate(x: jax.Array, w: jax.Array) -> jax.Array:
    """The paper's residual gate g = ½(sigmoid(x·w) − ½) ∈ (−¼, ¼): x [B, N, d_model], w [d_model] -> [B, N]."""
    if x.ndim != 3 or w.shape != x.shape[-1:]:
        raise ValueError(f"isa_gate: `w` has shape {w.shape} for x {x.shape}, expected x [B, N, M] and w [M]")
    return 0.5 * (jax.nn.sigmoid(x @ w) - 0.5)


def isa_flop_fraction(sizes: IsaSizes) -> float:
    """Attention FLOPs of ISA over those of dense attention (the head dim cancels)."""
    b, nb = sizes.block, sizes.n_blocks
    n, t_pruned = nb * b, sizes.n_pruned_blocks * b
    pooled = nb * nb
    full = sizes.n_full * b * t_pruned
    sparse = (nb - sizes.n_full) * b * (sizes.n_exact * b + sizes.n_pruned_blocks)
    return (pooled + full + sparse) / (n * n)
