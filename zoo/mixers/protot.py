"""ProtoT, the Prototype Transformer's mixer: tokens write to and read from learned prototypes, each a memory
channel that averages what it receives at several fixed time scales.

RECONSTRUCTION: the paper (Yordanov et al., "Prototype Transformer", arXiv 2602.11852, ICML 2026) establishes only a
linear-cost module of learned prototype vectors with two-way token <-> prototype communication over
channels at different time scales; its method section and code were not available. This mixer is one
well-defined design consistent with it (docs/papers.md) and is swappable as a whole (registered as "protot";
nothing else depends on it).

Per head (H banks of K₀ prototypes P [K₀, d_p]; S scales λ_s; K = K₀·S channels, channel k = j·S + s):

    a_t = softmax_j(⟨W_w x_t, p_j⟩ / √d_p)                       write weights [K₀], shared over scales
    w_t = (1 − λ) ⊙ repeat(a_t, S),   v_t = W_v x_t               [K], [d_v / H]
    m_{t,k} = λ_k m_{t−1,k} + w_{t,k} v_t,  n_{t,k} = λ_k n_{t−1,k} + w_{t,k}
    b_t = softmax_k(⟨W_r x_t, p_{j(k)}⟩ / √d_p + β_k)             read weights [K]
    r_t = Σ_k b_{t,k} m_{t,k} / (n_{t,k} + ε)
    y_t = W_o RMSNorm(concat_h r_t)

Both recurrences run through `kernels.ssd` (protot_parts.channel_counts / read_memories): the normalizers as
a scalar-decay SSD with one head per channel, the memories as a diagonal SSD with N = K, a = log λ and the
read coefficient b / (n + ε) as its C, so the memories are never materialized.

Options (`cfg.mixer_options`, see protot_parts.ProtoTOptions): num_prototypes (K₀, 64), scale_exponents
((1, 4, 7, 10): λ = 1 − 2^(−e)), decay ("fixed" = fixed scales, default; "learned" = learned scales, one
learnable λ_k = σ(θ_k) per prototype, K = K₀, init log-spaced over the exponent range), memory ("avg" |
"sum"), read ("joint" | "factored": adds per-scale logits W_s x, i.e. b = concept softmax × scale
softmax when β = 0), read_count_bias (False: add log(n + ε) to the read logits), prototype_dim (d_p, 64),
value_dim (d_v, d_model), num_heads (1; cfg.num_heads is not used), eps (1e-6), chunk_size (64),
implementation (None). Init: P ~ N(0, 1/d_p); W_w, W_r, W_v, W_s ~ N(0, 0.02); W_o ~
N(0, 0.02/√(2L)); β = 0.

Edits: `self.edit = protot_parts.PrototypeEdit(...)` (or through zoo.diagnostics.protot_hooks.edit_prototypes)
blocks writes, zeroes memories, pins or scales read weights. The edit is stored as arrays,
`self.edit_masks` (a protot_parts.PrototypeEditMasks or None), not as a static attribute, so one compiled
program serves every edit of the same shapes; `self.edit = None` removes them (the mixer is then exactly
the unedited one, parameters only).

Decode cache: "memory" [B, H, d_v/H, K] and "count" [B, H, K], float32, whatever max_len: O(K·d_v) per
token. T > 1 tokens are prefilled by the chunked op from the cached state, one token by `ssd_step`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.layers.norms import RMSNorm
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call
from icml26zoo.mixers.protot_parts import (
    LOG_DECAY_FLOOR,
    PrototypeEdit,
    PrototypeEditMasks,
    channel_counts,
    fixed_log_decay,
    learned_decay_init,
    parse_options,
    read_memories,
)
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

_SMALL_INIT = nnx.initializers.normal(0.02)


class ProtoTInternals(NamedTuple):
    """What one ProtoT call computes (float32), for the forward pass and the interpretability hooks."""

    write_weights: jax.Array  # a [B, T, H, K₀] (after edits)
    read_weights: jax.Array  # b [B, T, H, K] (after edits)
    counts: jax.Array  # n [B, T, H, K]
    reads: jax.Array  # r [B, T, H, d_v/H]
    memory: jax.Array  # final memories [B, H, d_v/H, K]
    count: jax.Array  # final normalizers [B, H, K]


@register_mixer("protot")
class ProtoT(nnx.Module):
    """ProtoT mixer: x [B, T, D] -> y [B, T, D] (see the module docstring for the maths and options)."""

    CONFORMANCE_OPTIONS = (
        (),
        (("num_prototypes", 6), ("decay", "learned"), ("memory", "sum"), ("read_count_bias", True),
         ("num_heads", 2)),
    )

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = opts = parse_options(cfg)
        self.d_model, self.dtype = cfg.d_model, jnp.dtype(cfg.compute_dtype)
        self.num_heads, self.num_prototypes = opts.num_heads, opts.num_prototypes
        self.num_scales = len(opts.scale_exponents) if opts.decay == "fixed" else 1
        self.num_channels = self.num_prototypes * self.num_scales
        self.head_value_dim = opts.value_dim // opts.num_heads
        self.edit_masks: PrototypeEditMasks | None = nnx.data(None)
        heads, d_p = opts.num_heads, opts.prototype_dim

        def linear(n_out: int, init: Any = _SMALL_INIT, n_in: int = cfg.d_model) -> nnx.Linear:
            return nnx.Linear(n_in, n_out, use_bias=False, dtype=self.dtype, param_dtype=jnp.float32,
                              kernel_init=init, rngs=rngs)

        proto_init = nnx.initializers.normal(1.0 / math.sqrt(d_p))
        self.prototypes = nnx.Param(proto_init(rngs.params(), (heads, self.num_prototypes, d_p), jnp.float32))
        self.write_proj = linear(heads * d_p)
        self.read_proj = linear(heads * d_p)
        self.value_proj = linear(opts.value_dim)
        self.read_bias = nnx.Param(jnp.zeros((heads, self.num_channels), jnp.float32))
        if opts.decay == "learned":
            theta = learned_decay_init(opts.scale_exponents, self.num_prototypes)
            self.decay_logit = nnx.Param(jnp.broadcast_to(jnp.asarray(theta), (heads, self.num_prototypes)))
        if opts.read == "factored":
            self.scale_proj = linear(heads * self.num_scales)
        self.norm = RMSNorm(opts.value_dim, eps=cfg.norm_eps)
        out_init = nnx.initializers.normal(0.02 / math.sqrt(2 * cfg.num_layers))
        self.out_proj = linear(cfg.d_model, out_init, n_in=opts.value_dim)

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions = None, cache: MixerCache = None
    ) -> MixerOutput:
        """x [B, T, D]; segment_ids, positions [B, T] or None (positions unused) -> (y [B, T, D], cache or None).

        Positions are not used: the recurrence carries order itself.
        """
        check_call(self, x, segment_ids, positions, cache)
        parts = self.internals(x, segment_ids=segment_ids, cache=cache)
        batch, length = x.shape[:2]
        reads = parts.reads.reshape(batch, length, self.options.value_dim)
        out = self.out_proj(self.norm(reads).astype(self.dtype))
        new_cache = None if cache is None else {"memory": parts.memory, "count": parts.count}
        return out, new_cache

    @property
    def edit(self) -> PrototypeEditMasks | None:
        """The edit's masks (see protot_parts.PrototypeEditMasks), or None when the mixer is unedited."""
        return self.edit_masks

    @edit.setter
    def edit(self, edit: PrototypeEdit | None) -> None:
        """Sets a PrototypeEdit (validated against this mixer's sizes) as masks, or None to remove them."""
        if edit is not None and not isinstance(edit, PrototypeEdit):
            raise ValueError(f"edit must be a PrototypeEdit or None, got {type(edit).__name__}")
        masks = None if edit is None else edit.mask_state(self.num_heads, self.num_prototypes, self.num_channels)
        self.edit_masks = nnx.data(masks)

    def decays(self) -> tuple[jax.Array, jax.Array]:
        """(log λ, 1 − λ), each [H, K] float32; λ ∈ [0, 1) for any θ."""
        heads, channels = self.num_heads, self.num_channels
        if self.options.decay == "learned":
            theta = self.decay_logit[...]
            log_lam = jnp.maximum(jax.nn.log_sigmoid(theta), jnp.float32(LOG_DECAY_FLOOR))
            return log_lam, jax.nn.sigmoid(-theta)
        exps = jnp.asarray(self.options.scale_exponents, jnp.float32)
        per_scale = jnp.asarray(fixed_log_decay(self.options.scale_exponents)), jnp.exp2(-exps)
        return tuple(jnp.broadcast_to(jnp.tile(z, self.num_prototypes), (heads, channels)) for z in per_scale)

    def _match(self, proj: nnx.Linear, x: jax.Array) -> jax.Array:
        """⟨proj(x)_h, p_{h,j}⟩ / √d_p: [B, T, D] -> [B, T, H, K₀] float32."""
        batch, length = x.shape[:2]
        q = proj(x).astype(jnp.float32).reshape(batch, length, self.num_heads, -1)
        logits = jnp.einsum("bthd,hjd->bthj", q, self.prototypes[...], precision=jax.lax.Precision.HIGHEST)
        return logits / jnp.float32(math.sqrt(self.options.prototype_dim))

    def _read_logits(self, x: jax.Array, counts: jax.Array) -> jax.Array:
        """[B, T, H, K] float32: concept match (repeated over scales) + β [+ W_s x] [+ log(n + ε)]."""
        logits = jnp.repeat(self._match(self.read_proj, x), self.num_scales, axis=-1) + self.read_bias[...]
        if self.options.read == "factored":
            batch, length = x.shape[:2]
            scale = self.scale_proj(x).astype(jnp.float32).reshape(batch, length, self.num_heads, self.num_scales)
            logits = logits + jnp.tile(scale, self.num_prototypes)
        if self.options.read_count_bias:
            logits = logits + jnp.log(counts + jnp.float32(self.options.eps))
        return logits

    def internals(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache: dict[str, jax.Array] | None = None
    ) -> ProtoTInternals:
        """Write/read weights, normalizers, reads [B, T, H, d_v/H] and the final state (see ProtoTInternals)."""
        opts, (batch, length) = self.options, x.shape[:2]
        # The masks are data, not weights: no gradient reaches them.
        masks = None if self.edit_masks is None else jax.lax.stop_gradient(self.edit_masks.get_value())
        write_weights = jax.nn.softmax(self._match(self.write_proj, x), axis=-1)
        if masks is not None:
            write_weights = write_weights * masks["write_keep"]
        log_lam, one_minus = self.decays()
        write = jnp.repeat(write_weights, self.num_scales, axis=-1) * one_minus
        counts, count = channel_counts(
            write, log_lam, segment_ids=segment_ids, count0=None if cache is None else cache["count"],
            implementation=opts.implementation,
        )
        read_weights = jax.nn.softmax(self._read_logits(x, counts), axis=-1)
        if masks is not None:
            read_weights = jnp.where(masks["pinned"] > 0, masks["pin_value"], read_weights) * masks["read_scale"]
        coeff = read_weights / (counts + jnp.float32(opts.eps)) if opts.memory == "avg" else read_weights
        if masks is not None:
            coeff = coeff * masks["memory_keep"]
        values = self.value_proj(x).astype(jnp.float32).reshape(batch, length, self.num_heads, self.head_value_dim)
        reads, memory = read_memories(
            values, write, coeff, log_lam, segment_ids=segment_ids,
            memory0=None if cache is None else cache["memory"], chunk_size=opts.chunk_size,
            implementation=opts.implementation,
        )
        return ProtoTInternals(write_weights, read_weights, counts, reads, memory, count)

    def _cache_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        """Shape of every cache entry: the single source for init_cache and its check."""
        return {
            "memory": (batch_size, self.num_heads, self.head_value_dim, self.num_channels),
            "count": (batch_size, self.num_heads, self.num_channels),
        }

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty float32 state: memory [B, H, d_v/H, K] and count [B, H, K] (zeros: nothing written yet).

        Its size does not depend on max_len; dtype is ignored (long time scales need a float32
        state). Reads no parameters."""
        del max_len, dtype
        return {name: jnp.zeros(shape, jnp.float32) for name, shape in self._cache_shapes(batch_size).items()}
