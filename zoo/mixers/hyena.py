"""Hyena, the order-N long-convolution mixer with implicit filters (Poli et al., arXiv 2302.10866;
after safari's hyena.py).

Per layer (D = d_model, order N ≥ 2, L_max = cfg.max_seq_len):

    x_0, …, x_{N−1}, v = split(shortconv(in_proj(x)))     in_proj D → (N+1)·D with bias; depthwise conv of
                                                         width 3 with bias, never across segments
    for o = 0..N−2:  v ← v ⊙ x_{N−1−o};  v ← h_o * v + bias_o ⊙ v     (* = causal long conv, the op)
    y = out_proj(v ⊙ x_0)                                out_proj with bias

Implicit filter (`hyena_filter`): h [L_max, N−1, D] = FFN(z_t) · exp(−t_norm·|δ_c|), with z_t = [t_norm,
cos(f_b w_t), −sin(f_b w_t)] (t_norm = t/(L_max−1), w_t = 2πt/L_max, f_b = linspace(1e-4, bands−1, bands)),
FFN = Linear → Sin → [Linear → Sin] × num_inner_mlps → Linear (no bias), Sin(x) = sin(ω ⊙ x) with a learned ω
(init 1), δ_c = linspace(log(1e-2)/1.5, log(1e-2)/0.3, channels) fixed. A sequence of T tokens uses the
first min(T, L_max) taps (the filter has no support beyond L_max), so T > L_max still runs.

Options (`cfg.mixer_options`): order (2), filter_order (the FFN width, 64), emb_dim (odd ≥ 3, 5),
num_inner_mlps (2), short_filter_order (3), implementation (the long-conv op's; default "xla", the FFT).

The FFT path ("xla", O(T log T)) is the default, as in Hyena itself. Its round-off spreads ~1e-7 of every
input over every output, so a future token's gradient into a past output is ~1e-7, not exactly 0; the class
declares that bound as CAUSAL_ROUNDOFF for the conformance harness (a true leak would be O(1)). Packed rows
use the op's exact masked path. implementation="direct" is the blocked masked sum, O(T²·D), exactly causal.

Decode: a CACHED form, not state-space distillation. The cache keeps the input of every long convolution
seen so far ("u" [B, N−1, max_len, D] float32), the short-conv state ("conv" [B, 2, (N+1)·D]) and a write
index. A chunk of T' tokens is written into the buffer and only its T' outputs y_p = Σ_{s≤p} h_{p−s} u_s are
computed (`kernels.long_conv.causal_long_conv_step`), O(T'·max_len·D), instead of re-running the layer over
the whole prefix. Decoding equals the forward pass (same float32 sums over the same taps).

Zoo choices: the filter FFN uses nnx.Linear's default init (safari uses PyTorch's); the gating and the long
convolutions run in float32 whatever the compute dtype; the positional features are a constant, not trained.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels.long_conv import LongConvState, causal_long_conv, causal_long_conv_step
from icml26zoo.layers.options import check_implementation
from icml26zoo.layers.short_conv import init_conv, short_conv
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call, read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer

IMPLEMENTATIONS = ("reference", "xla", "direct")


@dataclasses.dataclass(frozen=True)
class HyenaOptions:
    order: int = 2
    filter_order: int = 64
    emb_dim: int = 5
    num_inner_mlps: int = 2
    short_filter_order: int = 3
    implementation: str | tuple[str, ...] | None = "xla"


def parse_options(cfg: ModelConfig) -> HyenaOptions:
    """Reads and validates the Hyena options; a bad name or value raises ValueError naming the option."""
    values = read_mixer_options(cfg, "hyena", HyenaOptions)
    minimum = {"order": 2, "filter_order": 1, "emb_dim": 3, "num_inner_mlps": 0, "short_filter_order": 1}
    for name, low in minimum.items():
        if values[name] < low:
            raise ValueError(f"hyena mixer option {name!r} must be an integer >= {low}, got {values[name]!r}")
    if values["emb_dim"] % 2 == 0:
        raise ValueError(f"hyena mixer option 'emb_dim' must be odd (1 + 2·bands), got {values['emb_dim']!r}")
    check_implementation("hyena mixer", values["implementation"], IMPLEMENTATIONS)
    return HyenaOptions(**values)


def positional_features(max_len: int, emb_dim: int) -> tuple[jax.Array, jax.Array]:
    """z [L, emb_dim] = [t_norm, cos(f_b w_t), −sin(f_b w_t)] and t_norm [L], float32 (safari's hyena.py)."""
    t = jnp.arange(max_len, dtype=jnp.float32)
    t_norm = t / max(max_len - 1, 1)  # linspace(0, 1, L); L = 1 gives [0]
    bands = (emb_dim - 1) // 2
    freqs = jnp.linspace(1e-4, bands - 1, bands, dtype=jnp.float32)
    angle = freqs[None, :] * (2.0 * math.pi * t / max_len)[:, None]  # [L, bands]
    return jnp.concatenate([t_norm[:, None], jnp.cos(angle), -jnp.sin(angle)], axis=-1), t_norm


def decay_rates(channels: int, fast: float = 0.3, slow: float = 1.5, target: float = 1e-2) -> jax.Array:
    """|δ_c| [channels]: channel c decays to `target` at t_norm between 1/slow·… (slow) and fast (safari's hyena.py)."""
    return jnp.abs(jnp.linspace(math.log(target) / slow, math.log(target) / fast, channels, dtype=jnp.float32))


@register_mixer("hyena")
class Hyena(nnx.Module):
    """Hyena mixer: x [B, T, D] -> y [B, T, D] (see the module docstring for the maths, options and cache)."""

    CONFORMANCE_OPTIONS = ((),)
    # The FFT's round-off bound on a future input's gradient into a past output (see the module docstring).
    CAUSAL_ROUNDOFF = 1e-5

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = opts = parse_options(cfg)
        self.d_model, self.dtype, self.max_len = cfg.d_model, jnp.dtype(cfg.compute_dtype), cfg.max_seq_len
        d, order = cfg.d_model, opts.order
        self.in_proj = nnx.Linear(d, (order + 1) * d, dtype=self.dtype, param_dtype=jnp.float32, rngs=rngs)
        self.out_proj = nnx.Linear(d, d, dtype=self.dtype, param_dtype=jnp.float32, rngs=rngs)
        weight, bias = init_conv(rngs.params(), opts.short_filter_order, (order + 1) * d)
        self.conv_weight, self.conv_bias = nnx.Param(weight), nnx.Param(bias)

        def f32(n_in: int, n_out: int, bias: bool = True) -> nnx.Linear:
            return nnx.Linear(n_in, n_out, use_bias=bias, param_dtype=jnp.float32, dtype=jnp.float32,
                              precision=jax.lax.Precision.HIGHEST, rngs=rngs)

        width, channels = opts.filter_order, (order - 1) * d
        self.filter_layers = nnx.List([f32(opts.emb_dim, width)] + [f32(width, width)
                                                                    for _ in range(opts.num_inner_mlps)])
        self.filter_freqs = nnx.List([nnx.Param(jnp.ones((width,), jnp.float32))
                                      for _ in range(opts.num_inner_mlps + 1)])
        self.filter_out = f32(width, channels, bias=False)
        self.filter_bias = nnx.Param(jax.random.normal(rngs.params(), (order - 1, d), jnp.float32))

    def hyena_filter(self, length: int | None = None) -> jax.Array:
        """The implicit filters h [min(length, L_max), N−1, D] float32 (length None = L_max)."""
        z, t_norm = positional_features(self.max_len, self.options.emb_dim)
        hidden = z
        for layer, freq in zip(self.filter_layers, self.filter_freqs, strict=True):
            hidden = jnp.sin(freq[...] * layer(hidden))
        # the window multiplies the FFN output: |h_t| decays in t for a fixed FFN output
        h = self.filter_out(hidden) * jnp.exp(-t_norm[:, None] * decay_rates(self.filter_out.out_features))
        h = h.reshape(self.max_len, self.options.order - 1, self.d_model)
        return h if length is None else h[: min(length, self.max_len)]

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions = None, cache: MixerCache = None
    ) -> MixerOutput:
        """x [B, T, D]; segment_ids, positions [B, T] or None (positions unused) -> (y [B, T, D], cache or None).

        Positions are not used: the convolutions carry order themselves.
        """
        check_call(self, x, segment_ids, positions, cache, length_of=("u", 2))
        order, length = self.options.order, x.shape[1]
        conv_state = None if cache is None else cache["conv"]
        proj, new_conv = short_conv(self.in_proj(x), self.conv_weight[...], self.conv_bias[...],
                                     segment_ids=segment_ids, state=conv_state)  # float32 [B, T, (N+1)D]
        *gates, v = jnp.split(proj, order + 1, axis=-1)
        h = self.hyena_filter(length if cache is None else cache["u"].shape[2])
        bias = self.filter_bias[...]
        buffers = []
        for o in range(order - 1):
            v = v * gates[order - 1 - o]
            if cache is None:
                conv = causal_long_conv(v, h[:, o], segment_ids=segment_ids,
                                        implementation=self.options.implementation)
            else:
                state = LongConvState(cache["u"][:, o], cache["index"])
                conv, state = causal_long_conv_step(v, h[:, o], state=state)
                buffers.append(state.buffer)
            v = conv + bias[o] * v
        out = self.out_proj((v * gates[0]).astype(self.dtype))
        if cache is None:
            return out, None
        return out, {"conv": new_conv.astype(cache["conv"].dtype), "u": jnp.stack(buffers, axis=1),
                     "index": cache["index"] + jnp.asarray(length, jnp.int32)}

    def _cache_shapes(self, batch_size: int, max_len: int) -> dict[str, tuple[int, ...]]:
        order, d = self.options.order, self.d_model
        return {"conv": (batch_size, self.options.short_filter_order - 1, (order + 1) * d),
                "u": (batch_size, order - 1, max_len, d), "index": ()}

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty cache: conv [B, K−1, (N+1)·D] in dtype, u [B, N−1, max_len, D] float32 (the long-conv
        inputs so far) and index (int32 scalar). Reads no parameters."""
        shapes = self._cache_shapes(batch_size, max_len)
        return {"conv": jnp.zeros(shapes["conv"], dtype), "u": jnp.zeros(shapes["u"], jnp.float32),
                "index": jnp.zeros((), jnp.int32)}
