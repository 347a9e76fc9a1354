"""PBS-Attn (zoo/longctx/pbs.py; Wang et al., arXiv 2510.21270): the dense limit, the fast path against the
reference under the same plan, causality on original positions, the τ-mass selection rule, the permutation, bad
options, and the attention mixer's prefill option. Shapes: B 2, T 63 (a padded tail), H 4 on Hkv 2, D 16, blocks of 8,
segments of 16 (three complete segments and a 15-token tail)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.kernels.block_sparse_attention import reference
from icml26zoo.longctx import pbs
from icml26zoo.mixers.attention import Attention
from icml26zoo.models import ModelConfig

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

B, T, H, HKV, D, C, SEG = 2, 63, 4, 2, 16, 8, 16
TOL = 1e-5  # tests/tolerances.py "default" float32 bound (max-normalized); the paths reorder float32 sums


def _qkv(seed: int):
    rng = np.random.default_rng(seed)
    normal = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)
    # A few strong keys make the pooled scores peaked, so τ < 1 drops blocks.
    k = normal(B, T, HKV, D) * jnp.asarray(1.0 + 3.0 * (rng.random((B, T, 1, 1)) < 0.1), jnp.float32)
    return normal(B, T, H, D), k, normal(B, T, HKV, D)


def _dense(q, k, v):
    kf, vf = (jnp.repeat(x, H // HKV, axis=2) for x in (k, v))
    s = jnp.einsum("bthd,bshd->bhts", q, kf, precision="highest") * D**-0.5
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, axis=-1), vf, precision="highest")


def _err(got, want) -> float:
    return float(jnp.max(jnp.abs(got - want)) / max(1.0, float(jnp.max(jnp.abs(want)))))


@pytest.fixture(scope="module")
def run():
    return jax.jit(pbs.pbs_prefill, static_argnames=("tau", "block_size", "segment_size", "implementation",
                                                     "return_plan"))


def test_tau_one_is_dense_attention_and_perm_stays_in_segments(run):
    q, k, v = _qkv(0)
    out, plan = run(q, k, v, tau=1.0, block_size=C, segment_size=SEG, return_plan=True)
    assert _err(out, _dense(q, k, v)) < TOL
    perm = np.asarray(plan.perm)
    complete = (T // SEG) * SEG
    for start in range(0, complete, SEG):
        assert (np.sort(perm[..., start:start + SEG], axis=-1) == np.arange(start, start + SEG)).all()
    assert (perm[..., complete:] == np.arange(complete, T)).all()
    assert not (perm[..., :complete] == np.arange(complete)).all(), "the permutation should move some keys"


def test_sparse_plan_fast_path_causality_and_mass(run):
    """τ = 0.7: the XLA path equals the reference under the same plan, no query sees a later ORIGINAL key,
    and each query block's kept earlier-segment blocks hold ≥ τ of the pooled mass, minimally."""
    q, k, v = _qkv(1)
    tau = 0.7
    out, plan = run(q, k, v, tau=tau, block_size=C, segment_size=SEG, return_plan=True)
    kp, vp = pbs.permute_keys(k, plan.perm), pbs.permute_keys(v, plan.perm)
    want = reference.block_sparse_attention(q, kp, vp, plan.block_indices, block_size=C, key_positions=plan.perm)
    assert _err(out, want) < TOL
    assert _err(out, _dense(q, k, v)) > 1e-3, "τ = 0.7 should drop blocks here"
    mask = np.asarray(reference.token_mask(plan.block_indices, T, C, None, plan.perm))    # [B, H, Tq, Ts]
    key_pos = np.repeat(np.asarray(plan.perm), H // HKV, axis=1)[:, :, None, :]
    assert not (mask & (key_pos > np.arange(T)[:, None])).any()
    _check_mass(q, kp, np.asarray(plan.block_indices), tau)


def _check_mass(q, kp, idx, tau):
    """Recompute the pooled block softmax over earlier segments in numpy and check the kept set."""
    n = idx.shape[2]
    pad = lambda x: np.pad(np.asarray(x, np.float64), [(0, 0), (0, n * C - T), (0, 0), (0, 0)])
    q_bar = pad(q).reshape(B, n, C, H, D).mean(2)
    k_bar = np.repeat(pad(kp).reshape(B, n, C, HKV, D).mean(2), H // HKV, axis=2)
    seg_of = np.arange(n) * C // SEG
    for b in range(B):
        for h in range(H):
            for i in range(n):
                cand = np.flatnonzero(seg_of < seg_of[i])
                if cand.size == 0:
                    continue
                logits = k_bar[b, cand, h] @ q_bar[b, i, h] * D**-0.5
                p = np.exp(logits - logits.max())
                p /= p.sum()
                kept = np.isin(cand, idx[b, h, i])
                assert p[kept].sum() >= tau - 1e-6
                # Minimal up to the sink: without its smallest kept block (other than the sink) the mass is < τ.
                ranked = np.argsort(-p)
                top = ranked[np.cumsum(p[ranked]) - p[ranked] < tau]
                assert kept[top].all()


@pytest.mark.parametrize("field, value", [("tau", 0.0), ("tau", 1.5), ("tau", float("nan")), ("tau", -0.1),
                                          ("segment_size", 12), ("block_size", 0), ("max_blocks", 2)])
def test_bad_options_raise(field, value):
    q, k, v = _qkv(2)
    kwargs = {"tau": 0.9, "block_size": C, "segment_size": SEG, field: value}
    with pytest.raises(ValueError, match=field):
        pbs.pbs_prefill(q, k, v, **kwargs)


def _mixer(**options):
    cfg = ModelConfig(vocab_size=64, d_model=32, num_layers=1, num_heads=H, num_kv_heads=HKV, head_dim=D,
                      max_seq_len=T + 1, mixer_options=tuple(options.items()))
    return Attention(cfg, rngs=nnx.Rngs(0))


def test_attention_mixer_prefill_option():
    """prefill='pbs' with τ = 1 equals the dense cached prefill; τ = 0.5 changes it; bad options raise."""
    x = jnp.asarray(np.random.default_rng(3).standard_normal((B, T, 32)), jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    prefill = nnx.jit(lambda mixer, x, cache: mixer(x, positions=positions, cache=cache)[0])
    dense = _mixer()
    cache = dense.init_cache(B, T + 1, jnp.float32)
    want = prefill(dense, x, cache)
    sparse = {"prefill": "pbs", "pbs_block": C, "pbs_segment": SEG}
    for tau, same in ((1.0, True), (0.5, False)):
        mixer = _mixer(**sparse, pbs_tau=tau)
        nnx.update(mixer, nnx.state(dense))
        got = prefill(mixer, x, cache)
        assert (_err(got, want) < TOL) == same, f"τ = {tau}"
    with pytest.raises(ValueError, match="prefill"):
        _mixer(prefill="sparse")
    with pytest.raises(ValueError, match="pbs_"):
        _mixer(**sparse, pbs_tau=2.0)
    with pytest.raises(ValueError, match="alibi"):
        _mixer(**sparse, position="alibi")
    assert dataclasses.is_dataclass(pbs.PBSPrefillOptions)
