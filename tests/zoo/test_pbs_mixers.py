"""PBS-Attn prefill (`prefill="pbs"`) in the softmax-family mixers with logit terms: fox, goat, circulation
(without a blend: the block-sparse op; with β ≠ 1 and adaptive α: the plan's mask on materialized logits), fix.

Per mixer, one jitted "prefill a chunk into an empty cache, then decode one token" function runs three mixers
with shared parameters: dense, PBS at τ = 1 and PBS at τ = 0.3. Checked: τ = 1 equals the dense prefill
(outputs, the written cache, the next decode step); τ = 0.3 drops blocks, writes the same cache as the dense
prefill, decodes the next token as the dense mixer does, and its prefill equals a dense reference restricted
to the SAME token set: the mixer's own softmax weights (its `attention_weights`, biases included) masked by the
plan's token mask (`pbs.original_token_mask` of `pbs.select_blocks` on the mixer's q, k and key-side logit
term) and renormalized. Shapes: B 2, T 48 (three segments of 16, blocks of 8), H 4 on Hkv 2, head dim 8.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.kernels.value_forget_attention.reference import value_decays
from icml26zoo.layers import projections
from icml26zoo.longctx import pbs
from icml26zoo.mixers.circulation import CirculationAttention
from icml26zoo.mixers.fix import FineGrainedForgettingAttention
from icml26zoo.mixers.fox import ForgettingAttention
from icml26zoo.mixers.fox_parts import forget_gate_bias
from icml26zoo.mixers.goat import GOATAttention
from icml26zoo.models import ModelConfig

B, T, D_MODEL, H, HKV, DH, C, SEG = 2, 48, 32, 4, 2, 8, 8, 16
TAU = 0.3
TOL = 1e-5  # tests/tolerances.py "default" float32 bound (max-normalized): the paths reorder float32 sums
PBS = {"prefill": "pbs", "pbs_block": C, "pbs_segment": SEG}
pytestmark = pytest.mark.usefixtures("fast_compile")
POSITIONS = jnp.broadcast_to(jnp.arange(T + 1, dtype=jnp.int32), (B, T + 1))


MIXERS = {"fox": ForgettingAttention, "goat": GOATAttention, "circulation": CirculationAttention,
          "fix": FineGrainedForgettingAttention}


def _mixer(name: str, **options):
    cfg = ModelConfig(vocab_size=64, d_model=D_MODEL, num_layers=1, num_heads=H, num_kv_heads=HKV, head_dim=DH,
                      max_seq_len=T + 1, mixer_options=tuple(options.items()))
    return MIXERS[name](cfg, rngs=nnx.Rngs(0))


def _inputs(seed: int) -> jax.Array:
    rng = np.random.default_rng(seed)
    # A few loud tokens make the pooled block scores peaked, so τ < 1 drops blocks.
    loud = 1.0 + 4.0 * (rng.random((B, T + 1, 1)) < 0.1)
    return jnp.asarray(rng.standard_normal((B, T + 1, D_MODEL)) * loud, jnp.float32)


@nnx.jit
def _prefill_then_decode(mixer, x):
    cache = mixer.init_cache(B, T + 1, jnp.float32)
    y, cache = mixer(x[:, :T], positions=POSITIONS[:, :T], cache=cache)
    y_next, _ = mixer(x[:, T:], positions=POSITIONS[:, T:], cache=cache)
    return y, cache, y_next


def _err(got, want) -> float:
    got, want = jnp.asarray(got, jnp.float32), jnp.asarray(want, jnp.float32)
    return float(jnp.max(jnp.abs(got - want)) / max(1.0, float(jnp.max(jnp.abs(want)))))


def _masked(weights: jax.Array, mask: jax.Array) -> jax.Array:
    """The dense softmax weights [B, H, T, T] restricted to the mask and renormalized (= the masked softmax)."""
    kept = jnp.where(mask, weights, 0.0)
    return kept / jnp.sum(kept, axis=-1, keepdims=True)


def _grouped(v: jax.Array) -> jax.Array:
    return jnp.repeat(v.astype(jnp.float32), H // v.shape[2], axis=2)


@nnx.jit
def _fox_reference(mixer, x):
    q, k, v, _ = mixer._project_qkv(x, None, POSITIONS[:, :T], None)
    _, key_bias = forget_gate_bias(mixer.log_forget_gate(x))
    plan = pbs.select_blocks(q, k, options=mixer.pbs.options, key_bias=key_bias)
    probs = _masked(mixer.attention_weights(x, positions=POSITIONS[:, :T]), pbs.original_token_mask(plan, T, C))
    out = jnp.einsum("bhij,bjhd->bihd", probs, _grouped(v), precision="highest")
    return mixer._output(out, x), plan


@nnx.jit
def _goat_reference(mixer, x):
    positions = POSITIONS[:, :T]
    q, k, v = mixer.augmented_qkv(x, positions)
    _, key_bias = mixer.recency_terms(positions)
    plan = pbs.select_blocks(q, k, options=mixer.pbs.options, scale=1.0, key_bias=key_bias)
    probs = _masked(mixer.attention_weights(x, positions=positions), pbs.original_token_mask(plan, T, C))
    out = jnp.einsum("bhij,bjhd->bihd", probs, _grouped(v), precision="highest")
    return mixer.o_proj(out.reshape(B, T, H * DH)), plan


def _circulation_plan(mixer, x):
    q = projections.project_heads(x, mixer.q_proj, H, DH)
    k = _grouped(projections.project_heads(x, mixer.k_proj, HKV, DH))
    stats = mixer._prefix_stats(x, mixer.mask(None, B, T)[:, 0]) if mixer.options.adaptive else None
    q_t, k_t = mixer.pbs_query_key(q, k, stats)
    return pbs.select_blocks(q_t, k_t, options=mixer.pbs.options, scale=1.0), q, k


@nnx.jit
def _circulation_reference(mixer, x):
    """β = 1: the masked softmax of ℓ_α over the values. With a blend (β ≠ 1): H_org and H_α over the inputs,
    both restricted to the plan's tokens, blended, rescaled by clip(‖H_α‖/‖H_new‖), then W_V."""
    plan, q, k = _circulation_plan(mixer, x)
    mask = pbs.original_token_mask(plan, T, C)
    probs = _masked(mixer.attention_weights(x), mask)
    w_v = mixer.v_proj.kernel[...].reshape(D_MODEL, HKV, DH)
    if not mixer.retrieve_inputs:
        out = jnp.einsum("bhij,bjc,chd->bihd", probs, x, _grouped(w_v[None])[0], precision="highest")
        return mixer.o_proj(out.reshape(B, T, H * DH)), plan
    logits = jnp.einsum("bihd,bjhd->bhij", q, k, precision="highest") / DH**0.5
    probs_org = _masked(jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((T, T), bool)), logits, -jnp.inf)), mask)
    h_alpha = jnp.einsum("bhij,bjc->bihc", probs, x, precision="highest")
    h_org = jnp.einsum("bhij,bjc->bihc", probs_org, x, precision="highest")
    h_new = h_org + mixer.options.beta * (h_alpha - h_org)
    norm = lambda h: jnp.maximum(jnp.linalg.norm(h, axis=-1, keepdims=True), 1e-6)
    h_new = h_new * jnp.clip(norm(h_alpha) / norm(h_new), mixer.options.ratio_min, mixer.options.ratio_max)
    out = jnp.einsum("bihc,chd->bihd", h_new, _grouped(w_v[None])[0], precision="highest")
    return mixer.o_proj(out.reshape(B, T, H * DH)), plan


@nnx.jit
def _fix_reference(mixer, x):
    q, k, v = mixer._project_qkv(x, POSITIONS[:, :T])
    log_fgate = mixer.log_scalar_gate(x)
    _, key_bias = forget_gate_bias(log_fgate)
    plan = pbs.select_blocks(q, k, options=mixer.pbs.options, key_bias=key_bias)
    probs = _masked(mixer.attention_weights(x, positions=POSITIONS[:, :T]), pbs.original_token_mask(plan, T, C))
    decays = value_decays(mixer.log_value_gate(x), None)
    u = jnp.einsum("bhij,bhcij,bjhc->bihc", probs, decays, _grouped(v), precision="highest")
    return mixer._output(u, x), plan


REFERENCES = {
    "fox": (_fox_reference, {}),
    "goat": (_goat_reference, {"pos_rank": 2}),
    "circulation": (_circulation_reference, {"alpha": 0.6}),
    "circulation_blend": (_circulation_reference, {"alpha": 0.6, "beta": 2.0, "adaptive": "dev"}),
    "fix": (_fix_reference, {}),
}


@pytest.mark.parametrize("name", list(REFERENCES))
def test_pbs_prefill(name):
    """τ = 1 is the dense prefill; τ = 0.3 is the masked dense reference of its plan; cache and decode as dense."""
    reference, options = REFERENCES[name]
    x = _inputs(0)
    name = name.removesuffix("_blend")
    dense = _mixer(name, **options)
    want_y, want_cache, want_next = _prefill_then_decode(dense, x)
    for tau in (1.0, TAU):
        mixer = _mixer(name, **options, **PBS, pbs_tau=tau)
        nnx.update(mixer, nnx.state(dense))
        y, cache, y_next = _prefill_then_decode(mixer, x)
        for key in want_cache:
            assert _err(cache[key], want_cache[key]) < TOL, f"τ = {tau}: cache entry {key!r} differs from dense"
        assert _err(y_next, want_next) < TOL, f"τ = {tau}: the decode step after the PBS prefill"
        if tau == 1.0:
            assert _err(y, want_y) < TOL, "τ = 1 must equal the dense prefill"
            continue
        ref_y, plan = reference(mixer, x[:, :T])
        assert float(plan.density) < 0.95, "τ = 0.3 should drop blocks here"
        assert _err(y, want_y) > 1e-3, "τ = 0.3 should change the prefill"
        assert _err(y, ref_y) < TOL, "PBS prefill vs the masked dense reference of the same blocks"


@pytest.mark.parametrize("name", list(MIXERS))
def test_bad_prefill_options_raise(name):
    """Unknown options list the PBS ones; a bad mode or pbs_* value raises naming it (no compilation here)."""
    with pytest.raises(ValueError, match="pbs_max_blocks"):
        _mixer(name, pbs_threshold=0.5)
    with pytest.raises(ValueError, match="prefill"):
        _mixer(name, prefill="sparse")
    with pytest.raises(ValueError, match="pbs_.*tau"):
        _mixer(name, **PBS, pbs_tau=1.5)
    with pytest.raises(ValueError, match="segment_size"):
        _mixer(name, **{**PBS, "pbs_segment": 12})
    if name == "circulation":
        with pytest.raises(ValueError, match="causal"):
            _mixer(name, **PBS, causal=False)
