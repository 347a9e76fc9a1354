"""The ProtoT mixer (a reconstruction, docs/papers.md): a float64 per-token reference of the whole layer
(write, memory, read), the SSD-based parallel recurrence against the step-by-step reference (outputs and
gradients), the reconstruction's invariants, the interpretability hooks and edits, options and the cache. The
model-level checks (causality, decode = forward, packed = padded, ...) run in tests/zoo/test_conformance.py.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import mixer_helpers as mh
import numpy as np
import optax
import pytest
from flax import nnx
from mixer_helpers import F32, SEGMENTS, B, T

from icml26zoo.diagnostics import protot_hooks as hooks
from icml26zoo.mixers.protot import ProtoT
from icml26zoo.mixers.protot_parts import PrototypeEdit, channel_counts, read_memories, reference_recurrence
from icml26zoo.models import build_model
from icml26zoo.registry import MIXERS

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = mh.small_config(mixer="protot", num_layers=2)
SMALL = (("num_prototypes", 5), ("prototype_dim", 8))


_mixer = functools.partial(mh.build_mixer, ProtoT, CFG, *SMALL)
_inputs = functools.partial(mh.random_inputs, CFG.d_model, draw_dtype=jnp.float32)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _retention(m: ProtoT) -> np.ndarray:
    """λ [H, K] float64, straight from the options / parameters (λ = 1 − 2^(−e) or σ(θ))."""
    if m.options.decay == "learned":
        return 1.0 / (1.0 + np.exp(-mh.f64(m.decay_logit)))
    lam = 1.0 - 2.0 ** -np.asarray(m.options.scale_exponents, np.float64)
    return np.broadcast_to(np.tile(lam, m.num_prototypes), (m.num_heads, m.num_channels))


def _layer_reference(m: ProtoT, x, segments) -> np.ndarray:
    """The ProtoT layer as a plain float64 loop over tokens (write, memory, read), state reset per segment."""
    x = np.asarray(x, np.float64)
    heads, k0, scales, dp, eps = m.num_heads, m.num_prototypes, m.num_scales, m.options.prototype_dim, m.options.eps
    protos, lam = mh.f64(m.prototypes), _retention(m)
    match = lambda proj: np.einsum("bthd,hjd->bthj", (x @ mh.f64(proj.kernel)).reshape(B, -1, heads, dp), protos)
    write = _softmax(match(m.write_proj) / math.sqrt(dp))  # [B, T, H, K₀]
    concept = np.repeat(match(m.read_proj) / math.sqrt(dp), scales, axis=-1) + mh.f64(m.read_bias)
    if m.options.read == "factored":
        concept = concept + np.tile((x @ mh.f64(m.scale_proj.kernel)).reshape(B, -1, heads, scales), k0)
    values = (x @ mh.f64(m.value_proj.kernel)).reshape(B, x.shape[1], heads, -1)
    reads = np.zeros(values.shape)
    for b in range(B):
        for t in range(x.shape[1]):
            if t == 0 or segments[b, t] != segments[b, t - 1]:
                mem, norm = np.zeros((heads, m.num_channels, values.shape[-1])), np.zeros((heads, m.num_channels))
            w = (1.0 - lam) * np.repeat(write[b, t], scales, axis=-1)  # [H, K]
            mem = lam[..., None] * mem + w[..., None] * values[b, t][:, None, :]
            norm = lam * norm + w
            logits = concept[b, t] + (np.log(norm + eps) if m.options.read_count_bias else 0.0)
            read = _softmax(logits)
            avg = mem / (norm[..., None] + eps) if m.options.memory == "avg" else mem
            reads[b, t] = np.einsum("hk,hkp->hp", read, avg)
    return mh.norm_and_project_reference(reads.reshape(B, x.shape[1], -1), m.norm, m.out_proj)


def test_registered():
    assert MIXERS.get("protot") is ProtoT


@pytest.mark.parametrize(
    "options",
    [(), (("read", "factored"), ("read_count_bias", True), ("scale_exponents", (0, 2, 9))),
     (("decay", "learned"), ("memory", "sum"), ("num_heads", 2))],
    ids=["default", "factored-countbias-lambda0", "learned-sum-2heads"],
)
def test_layer_matches_float64_recurrence(options):
    m = _mixer(*options)
    state = nnx.state(m, nnx.Param)
    state["read_bias"] = nnx.Param(jax.random.normal(jax.random.key(9), m.read_bias.shape))  # β ≠ 0 matters
    nnx.update(m, state)
    x, pos = _inputs(1)
    expected = _layer_reference(m, x, SEGMENTS)
    np.testing.assert_allclose(mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos), expected, **F32)


def _core_inputs(length, seed=0, heads=2, channels=6, width=3):
    keys = jax.random.split(jax.random.key(seed), 6)
    v = jax.random.normal(keys[0], (B, length, heads, width))
    write = jax.random.uniform(keys[1], (B, length, heads, channels), minval=0.01)
    read = jax.nn.softmax(jax.random.normal(keys[2], (B, length, heads, channels)), axis=-1)
    exps = jnp.asarray([0.0, 1.0, 3.0, 5.0, 8.0, 11.0])[:channels]
    log_decay = jnp.broadcast_to(jnp.maximum(jnp.log1p(-(2.0**-exps)), -100.0), (heads, channels))
    memory0 = jax.random.normal(keys[3], (B, heads, width, channels))
    count0 = jax.random.uniform(keys[4], (B, heads, channels))
    cut = length // 3
    segments = jnp.asarray(np.repeat([[1, 2, 3]], B, 0).repeat([cut, cut, length - 2 * cut], axis=1), jnp.int32)
    return (v, write, read, log_decay, memory0, count0), segments


def _parallel(v, write, read, log_decay, memory0, count0, *, segment_ids, chunk_size, memory="avg", eps=1e-6):
    counts, count = channel_counts(write, log_decay, segment_ids=segment_ids, count0=count0, implementation=None)
    coeff = read / (counts + eps) if memory == "avg" else read
    reads, mem = read_memories(v, write, coeff, log_decay, segment_ids=segment_ids, memory0=memory0,
                               chunk_size=chunk_size, implementation=None)
    return reads, counts, mem, count


def _reference(v, write, read, log_decay, memory0, count0, *, segment_ids, memory="avg", eps=1e-6):
    reads, counts, _, mem, count = reference_recurrence(
        v, write, read, log_decay, memory=memory, eps=eps, segment_ids=segment_ids, memory0=memory0, count0=count0
    )
    return reads, counts, mem, count


@pytest.mark.parametrize("length, chunk, memory", [(1, 16, "avg"), (63, 64, "avg"), (129, 16, "sum")])
def test_parallel_ssd_form_equals_recurrence_outputs_and_gradients(length, chunk, memory):
    """The chunked SSD path = the step-by-step recurrence for memories and normalizers, with
    initial states and packed segments; every gradient (decays included) under random cotangents."""
    args, segments = _core_inputs(length)
    fast = jax.jit(lambda *a: _parallel(*a, segment_ids=segments, chunk_size=chunk, memory=memory))
    slow = jax.jit(lambda *a: _reference(*a, segment_ids=segments, memory=memory))
    out_fast, vjp_fast = jax.vjp(fast, *args)
    out_slow, vjp_slow = jax.vjp(slow, *args)
    for actual, expected in zip(out_fast, out_slow, strict=True):
        np.testing.assert_allclose(actual, expected, **F32)
    keys = jax.random.split(jax.random.key(length), 4)
    cotangents = tuple(jax.random.normal(kk, o.shape) for kk, o in zip(keys, out_slow, strict=True))
    for actual, expected in zip(vjp_fast(cotangents), vjp_slow(cotangents), strict=True):
        scale = float(jnp.abs(expected).max())
        np.testing.assert_allclose(actual, expected, atol=1e-5 * max(scale, 1.0), rtol=1e-4)


def test_constant_values_read_back_as_that_constant():
    """"avg": m̄ is a convex combination of the values (weights summing to n/(n+ε)), so v ≡ u reads back
    u · Σ_k b_k n_k/(n_k+ε) — u itself up to ε; "sum" reads back a decayed, unnormalized multiple."""
    (v, write, read, log_decay, _, _), segments = _core_inputs(40)
    u = jnp.asarray([0.5, -2.0, 3.0])
    const = jnp.broadcast_to(u, v.shape)
    reads, counts, _, _ = _parallel(const, write, read, log_decay, None, None, segment_ids=segments, chunk_size=16)
    weight = jnp.sum(read * counts / (counts + 1e-6), axis=-1, keepdims=True)
    np.testing.assert_allclose(reads, weight * u, **F32)
    np.testing.assert_allclose(weight, 1.0, atol=1e-3)


def test_avg_memories_lie_in_the_hull_of_values_and_zero():
    m = _mixer()
    x, _ = _inputs(2, length=24)
    memories, _ = nnx.jit(hooks.channel_memories)(m, x)  # [B, T, H, K, P]
    values = m.value_proj(x).reshape(B, 24, 1, 1, -1)
    low = jnp.minimum(jax.lax.cummin(values, axis=1), 0.0)
    high = jnp.maximum(jax.lax.cummax(values, axis=1), 0.0)
    assert bool(jnp.all(memories >= low - 1e-6)) and bool(jnp.all(memories <= high + 1e-6))


def test_write_and_read_weights_are_distributions():
    m = _mixer(("num_heads", 2), ("read", "factored"))
    x, _ = _inputs(3)
    a, b = hooks.prototype_assignments(m, x)
    assert a.shape == (B, T, 2, 5) and b.shape == (B, T, 2, 5 * 4)
    for w in (a, b):
        assert bool(jnp.all(w >= 0))
        np.testing.assert_allclose(w.sum(-1), 1.0, **F32)


@pytest.mark.parametrize("options", [(), (("decay", "learned"), ("read_count_bias", True))], ids=["fixed", "learned"])
def test_relabelling_prototypes_leaves_output_unchanged(options):
    """Permute the prototypes with their λ (θ) and β; the output stays the same."""
    m = _mixer(*options)
    perm = np.array([3, 0, 4, 1, 2])
    channels = (perm[:, None] * m.num_scales + np.arange(m.num_scales)).reshape(-1)
    state = nnx.state(m, nnx.Param)
    beta = jax.random.normal(jax.random.key(4), m.read_bias.shape)
    state["read_bias"] = nnx.Param(beta)
    nnx.update(m, state)
    x, pos = _inputs(5)
    expected = mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos)
    state["prototypes"] = nnx.Param(m.prototypes[...][:, perm])
    state["read_bias"] = nnx.Param(beta[:, channels])
    if m.options.decay == "learned":
        state["decay_logit"] = nnx.Param(m.decay_logit[...][:, perm])
    nnx.update(m, state)
    np.testing.assert_allclose(mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos), expected, **F32)


def test_zero_retention_is_pointwise():
    """All λ = 0 -> every token alone gives the same output: no mixing across time."""
    m = _mixer(("scale_exponents", (0,)))
    x, pos = _inputs(6)
    together = mh.mixer_output(m, x, None, pos)
    alone = jnp.concatenate([mh.mixer_output(m, x[:, t : t + 1], None, pos[:, :1]) for t in range(T)], axis=1)
    np.testing.assert_allclose(together, alone, **F32)


def test_one_prototype_one_scale_is_an_ema_of_values():
    """K₀ = S = 1 -> r_t = EMA_t(v) / (1 − λ^(t+1) + ε), the bias-corrected EMA."""
    m = _mixer(("num_prototypes", 1), ("scale_exponents", (2,)))
    x, pos = _inputs(7)
    lam = 0.75
    v = np.asarray(m.value_proj(x), np.float64)
    ema, reads = np.zeros(v.shape[::2]), np.zeros(v.shape)
    for t in range(T):
        ema = lam * ema + (1 - lam) * v[:, t]
        reads[:, t] = ema / (1 - lam ** (t + 1) + 1e-6)
    expected = m.out_proj(m.norm(jnp.asarray(reads, jnp.float32)))
    np.testing.assert_allclose(mh.mixer_output(m, x, None, pos), expected, **F32)


def test_edits_block_writes_zero_memories_and_pin_reads():
    """Blocking writes to prototype j keeps m̄ of its channels at 0, which equals zeroing those
    memories, and pinning their read weights to 0 on top changes nothing; the edit does change the output."""
    m = _mixer(("num_heads", 2))
    x, pos = _inputs(8)
    segments = jnp.asarray(SEGMENTS)
    channels = hooks.channels_of_prototype(m, 2)
    assert channels == (8, 9, 10, 11)
    plain = mh.mixer_output(m, x, segments, pos)
    m.edit = PrototypeEdit(block_writes=(2,))
    blocked = mh.mixer_output(m, x, segments, pos)
    memories, counts = nnx.jit(hooks.channel_memories)(m, x, segment_ids=segments)
    assert float(jnp.abs(memories[..., channels, :]).max()) == 0.0 and float(jnp.abs(counts[..., channels]).max()) == 0
    assert float(jnp.abs(memories).max()) > 0 and float(jnp.abs(blocked - plain).max()) > 1e-4
    m.edit = PrototypeEdit(zero_memories=channels)
    np.testing.assert_allclose(mh.mixer_output(m, x, segments, pos), blocked, **F32)
    m.edit = PrototypeEdit(block_writes=(2,), pin_reads=tuple((k, 0.0) for k in channels))
    np.testing.assert_allclose(mh.mixer_output(m, x, segments, pos), blocked, **F32)
    m.edit = PrototypeEdit(block_writes=(2,), heads=(1,))
    a, _ = hooks.prototype_assignments(m, x)
    assert float(a[:, :, 1, 2].max()) == 0.0 and float(a[:, :, 0, 2].min()) > 0


def test_scale_reads_multiplies_the_read_weights_of_the_listed_channels():
    """A factor of 1 is the identity, 0 equals pinning the read weight to 0, and a factor > 1 scales b."""
    m = _mixer(("num_heads", 2))
    x, pos = _inputs(10)
    plain = mh.mixer_output(m, x, None, pos)
    _, reads = hooks.prototype_assignments(m, x)
    m.edit = PrototypeEdit(scale_reads=((3, 1.0), (7, 1.0)))
    np.testing.assert_allclose(mh.mixer_output(m, x, None, pos), plain, **F32)
    m.edit = PrototypeEdit(scale_reads=((3, 0.0),))
    silenced = mh.mixer_output(m, x, None, pos)
    assert float(jnp.abs(silenced - plain).max()) > 1e-5
    m.edit = PrototypeEdit(pin_reads=((3, 0.0),))
    np.testing.assert_allclose(mh.mixer_output(m, x, None, pos), silenced, **F32)
    m.edit = PrototypeEdit(scale_reads=((3, 2.0), (3, 1.5)), heads=(1,))
    _, scaled = hooks.prototype_assignments(m, x)
    np.testing.assert_allclose(scaled[..., 1, 3], 3.0 * reads[..., 1, 3], **F32)
    np.testing.assert_allclose(scaled[..., 0, :], reads[..., 0, :], **F32)
    for factor in (-1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match=r"PrototypeEdit.scale_reads factors must be finite numbers >= 0"):
            m.edit = PrototypeEdit(scale_reads=((3, factor),))


def test_bad_edits_raise():
    m = _mixer()
    with pytest.raises(ValueError, match=r"PrototypeEdit.block_writes must hold integers in \[0, 5\), got \(5,\)"):
        m.edit = PrototypeEdit(block_writes=(5,))
    with pytest.raises(ValueError, match=r"edit must be a PrototypeEdit or None, got dict"):
        m.edit = {"block_writes": (1,)}
    assert m.edit is None
    model = build_model(dataclasses.replace(CFG, mixer_options=SMALL), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"PrototypeEdit.pin_reads must hold integers in \[0, 20\)"):
        hooks.edit_prototypes(model, {0: PrototypeEdit(pin_reads=((20, 1.0),))})
    with pytest.raises(ValueError, match=r"layer must be an integer in \[0, 1\], got 2"):
        hooks.edit_prototypes(model, {2: None})


@pytest.mark.parametrize(
    "options", [(("read", "factored"), ("read_count_bias", True)), (("memory", "sum"), ("chunk_size", 16))],
    ids=["factored-countbias", "sum"],
)
def test_chunked_prefill_and_steps_equal_forward(options):
    m = _mixer(*options)
    x, pos = _inputs(9, length=23)
    full = mh.mixer_output(m, x, None, pos)
    y, cache = mh.decode_in_chunks(m, x, pos, m.init_cache(B, 32, jnp.float32), (1, 7, 1, 1, 13))
    np.testing.assert_allclose(y, full, **F32)
    assert cache["memory"].shape == (B, 1, 32, 20) and cache["count"].dtype == jnp.float32
    # O(K·d_v) state per row, whatever the length: decoding costs the same per token at any position.
    assert m.init_cache(B, 4096, jnp.float32)["memory"].shape == cache["memory"].shape


def test_hooks_top_tokens_and_usage():
    cfg = dataclasses.replace(CFG, mixer_options=SMALL)
    model = build_model(cfg, rngs=nnx.Rngs(1))
    tokens = jax.random.randint(jax.random.key(2), (B, 12), 0, 64, dtype=jnp.int32)
    segments = jnp.asarray(np.array([[1] * 9 + [0] * 3, [1] * 12]), jnp.int32)
    top = hooks.top_tokens_per_prototype(model, tokens, 1, 4, segment_ids=segments)
    assert all(z.shape == (1, 5, 4) for z in top)
    assert (np.diff(top.weights, axis=-1) <= 0).all() and not ((top.rows == 0) & (top.positions >= 9)).any()
    np.testing.assert_array_equal(top.token_ids, np.asarray(tokens)[top.rows, top.positions])
    mixer = hooks.layer_mixer(model, 1)
    a, _ = hooks.prototype_assignments(mixer, hooks.mixer_inputs(model, tokens, 1, segment_ids=segments))
    np.testing.assert_allclose(top.weights, np.asarray(a)[top.rows, top.positions, 0, np.arange(5)[:, None]])
    usage, entropy = hooks.prototype_usage(a, segment_ids=segments)
    np.testing.assert_allclose(usage.sum(-1), 1.0, **F32)
    assert 0 < float(entropy[0]) <= math.log(5) + 1e-6
    too_many = r"k \(at most the number of real tokens\) must be an integer in \[1, 21\], got 22"
    with pytest.raises(ValueError, match=too_many):
        hooks.top_tokens_per_prototype(model, tokens, 1, 22, segment_ids=segments)


def test_edited_model_is_a_copy_and_decodes_like_its_forward():
    model = build_model(dataclasses.replace(CFG, mixer_options=SMALL), rngs=nnx.Rngs(3))
    tokens = jax.random.randint(jax.random.key(4), (B, 8), 0, 64, dtype=jnp.int32)
    edits = {0: PrototypeEdit(block_writes=(0, 1, 2)), 1: PrototypeEdit(pin_reads=((3, 1.0),))}
    edited = hooks.edit_prototypes(model, edits)
    assert hooks.layer_mixer(model, 0).edit is None
    write_keep = np.asarray(hooks.layer_mixer(edited, 0).edit.get_value()["write_keep"])
    np.testing.assert_array_equal(write_keep, [[0.0, 0.0, 0.0, 1.0, 1.0]])  # [H, K₀]: one head
    traces = []
    forward = nnx.jit(lambda m, t: (traces.append(m.cfg.scan_layers), m(t))[1])
    decode = nnx.jit(lambda m, t, c: m.decode(t, c))
    logits = forward(edited, tokens)
    plain = forward(model, tokens)
    assert float(jnp.abs(logits - plain).max()) > 1e-4
    # The edits are traced arrays: an unedited copy (identity masks, the same outputs bit for bit) and
    # another edit reuse the edited copy's program; only the unedited (scanned) model traced again.
    np.testing.assert_array_equal(forward(hooks.edit_prototypes(model, {}), tokens), plain)
    other = forward(hooks.edit_prototypes(model, {1: PrototypeEdit(scale_reads=((0, 3.0),))}), tokens)
    assert float(jnp.abs(other - plain).max()) > 1e-4 and traces == [False, True]
    first, cache = decode(edited, tokens[:, :5], edited.init_cache(B))
    second, _ = decode(edited, tokens[:, 5:], cache)
    np.testing.assert_allclose(jnp.concatenate([first, second], axis=1), logits, **F32)


@pytest.mark.parametrize(
    "options, match",
    [
        ((("decay", "adaptive"),), r"'decay' must be one of \['fixed', 'learned'\], got 'adaptive'"),
        ((("memory", "mean"),), r"'memory' must be one of \['avg', 'sum'\]"),
        ((("read", "product"),), r"'read' must be one of \['joint', 'factored'\]"),
        ((("prototypes", 8),), r"unknown protot mixer option 'prototypes'"),
        ((("num_prototypes", 0),), r"'num_prototypes' must be an integer >= 1, got 0"),
        ((("scale_exponents", ()),), r"'scale_exponents' must be a non-empty tuple"),
        ((("scale_exponents", (1, 1)),), r"'scale_exponents' must be free of duplicates"),
        ((("scale_exponents", (0, 3)), ("decay", "learned")), r"'scale_exponents' must be all > 0 with decay="),
        ((("read", "factored"), ("decay", "learned")), r"'read' must be 'joint' with decay='learned'"),
        ((("num_heads", 3),), r"'num_heads' must be a divisor of value_dim = 32, got 3"),
        ((("eps", 0.0),), r"'eps' must be a positive number"),
        ((("chunk_size", 48),), r"'chunk_size' must be one of"),
        ((("read_count_bias", 1),), r"'read_count_bias' must be a bool"),
        ((("implementation", "cuda"),), r"'implementation' must be None"),
    ],
    ids=["decay", "memory", "read", "unknown", "k0", "scales-empty", "scales-dup", "learned-zero", "factored-learned",
         "heads", "eps", "chunk", "countbias", "impl"],
)
def test_bad_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        _mixer(*options)


def test_bad_cache_raises():
    m = _mixer()
    x, pos = _inputs(10)
    with pytest.raises(ValueError, match=r"segment_ids must be None when decoding"):
        m(x, segment_ids=jnp.asarray(SEGMENTS), positions=pos, cache=m.init_cache(B, 32, jnp.float32))
    with pytest.raises(ValueError, match=r"cache must have entries"):
        m(x, positions=pos, cache=m.init_cache(B + 1, 32, jnp.float32))


def test_bfloat16_forward_finite():
    m = _mixer(compute_dtype="bfloat16")
    x, pos = _inputs(11, dtype=jnp.bfloat16)
    y = mh.mixer_output(m, x, jnp.asarray(SEGMENTS), pos)
    assert y.dtype == jnp.bfloat16 and bool(jnp.isfinite(y.astype(jnp.float32)).all())


def test_a_few_training_steps_reduce_the_loss():
    """A tiny LM fits a fixed batch of a repeating pattern: the loss falls over 15 SGD steps."""
    model = build_model(dataclasses.replace(CFG, mixer_options=SMALL), rngs=nnx.Rngs(5))
    tokens = jnp.asarray(np.tile(np.arange(7), (B, 4))[:, :24], jnp.int32)
    graphdef, params = nnx.split(model, nnx.Param)
    optimizer = optax.sgd(0.05, momentum=0.9)

    def loss_fn(params):
        logits = nnx.merge(graphdef, params)(tokens)[:, :-1]
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state, losses = optimizer.init(params), []
    for _ in range(15):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0], losses
