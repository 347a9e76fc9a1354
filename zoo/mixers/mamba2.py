"""Mamba2, the SSD state-space mixer, with Mamba2's scalar decay or the generalized diagonal decay.

Paper: Dao & Gu, "Transformers are SSMs" (Mamba2, ICML 2024, arXiv 2405.21060); layer and init as in
`mamba2_simple.py`. Per token t (D = d_model,
d_inner = expand·D, H = d_inner / P heads of width P, N the state size, G groups sharing B and C):

    z, xBC = in_proj(x)                          z [d_inner], xBC [d_inner + 2·G·N]
    x, B, C = split(silu(conv(xBC)))             causal depthwise conv of width K, never across segments
    Δ = softplus(dt_proj(x) + dt_bias)           [H], float32
    log a = Δ · A,   A = −exp(A_log)             A_log [H] ("scalar") or [H, N] ("diagonal"), float32
    S_t = S_{t−1} diag(exp(log a_t)) + (Δ x_t) B_tᵀ,   y_t = S_t C_t + D x_t     (the `kernels.ssd` op)
    out = out_proj(RMSNorm(y ⊙ silu(z)))         gate, then norm (Mamba2's norm_before_gate=False)

Options (`cfg.mixer_options`, see mamba2_parts.Mamba2Options): decay ("scalar" | "diagonal"), expand (2),
head_dim (P; default cfg.resolved_head_dim), state_size (N, 16), num_groups (G, 1), conv_size (K, 4),
chunk_size (64), implementation (None = the op's default), dt_min / dt_max (1e-3, 1e-1: the initial Δ range).
cfg.num_heads and num_kv_heads are not used: the head count follows from expand and head_dim.

Zoo choices: Δ comes from its own float32 projection `dt_proj` (Mamba2 fuses it into in_proj; the maths is
the same, but a bfloat16 Δ would lose digits before the softplus and the exp). The diagonal variant gives
each (head, state dim) its own A; Δ stays per head. Inputs and outputs of the op (Δx, B, C, y) are in the
compute dtype; Δ, the decays and the SSM state are float32.

Decode cache: "conv" [B, K−1, d_inner + 2GN] (the last K−1 conv inputs, compute dtype) and "ssm"
[B, H, P, N] float32. A chunk of T > 1 tokens is prefilled by the chunked op from the cached state; a single
token takes one `ssd_step`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.kernels.ssd import ssd, ssd_step
from icml26zoo.layers import projections
from icml26zoo.layers.norms import RMSNorm
from icml26zoo.layers.short_conv import init_conv, short_conv
from icml26zoo.mixers.base import MixerCache, MixerOutput, Positions, SegmentIds, check_call
from icml26zoo.mixers.mamba2_parts import init_a_log, init_dt_bias, parse_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_mixer


@register_mixer("mamba2")
class Mamba2(nnx.Module):
    """Mamba2 mixer: x [B, T, D] -> y [B, T, D] (see the module docstring for the maths and options)."""

    CONFORMANCE_OPTIONS = ((), (("decay", "diagonal"),))

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = opts = parse_options(cfg)
        self.d_model, self.dtype = cfg.d_model, jnp.dtype(cfg.compute_dtype)
        self.d_inner = opts.expand * cfg.d_model
        self.head_dim, self.state_size, self.num_groups = opts.head_dim, opts.state_size, opts.num_groups
        self.num_heads = self.d_inner // opts.head_dim
        self.conv_dim = self.d_inner + 2 * opts.num_groups * opts.state_size

        linear = functools.partial(projections.linear, dtype=self.dtype, rngs=rngs)

        self.in_proj = linear(cfg.d_model, self.d_inner + self.conv_dim)  # [z | x B C]
        self.dt_proj = linear(cfg.d_model, self.num_heads, dtype=jnp.float32, precision=jax.lax.Precision.HIGHEST)
        weight, bias = init_conv(rngs.params(), opts.conv_size, self.conv_dim)
        self.conv_weight, self.conv_bias = nnx.Param(weight), nnx.Param(bias)
        self.dt_bias = nnx.Param(init_dt_bias(rngs.params(), self.num_heads, opts.dt_min, opts.dt_max))
        a_shape = (self.num_heads,) if opts.decay == "scalar" else (self.num_heads, opts.state_size)
        self.A_log = nnx.Param(init_a_log(rngs.params(), a_shape))
        self.D = nnx.Param(jnp.ones((self.num_heads,), jnp.float32))
        self.norm = RMSNorm(self.d_inner, eps=cfg.norm_eps)
        self.out_proj = linear(self.d_inner, cfg.d_model)

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions = None, cache: MixerCache = None
    ) -> MixerOutput:
        """SSD over the short-conv'd heads, D skip, gated RMSNorm: x [B, T, D] -> y [B, T, D].

        Positions are not used: the conv and the SSD recurrence carry order themselves.
        """
        check_call(self, x, segment_ids, positions, cache)
        batch, length = x.shape[:2]
        z, xbc = jnp.split(self.in_proj(x), [self.d_inner], axis=-1)
        conv_state = None if cache is None else cache["conv"]
        xbc, new_conv = short_conv(
            xbc, self.conv_weight[...], self.conv_bias[...], segment_ids=segment_ids, state=conv_state
        )
        xs, b, c = self._split_heads(jax.nn.silu(xbc).astype(self.dtype))
        dt, log_a = self.discretize(x)
        x_dt = (xs.astype(jnp.float32) * dt[..., None]).astype(self.dtype)
        y, ssm_state = self._ssd(x_dt, log_a, b, c, segment_ids, None if cache is None else cache["ssm"])
        y = y.astype(jnp.float32) + self.D[...][:, None] * xs.astype(jnp.float32)  # the D skip, per head
        gated = y.reshape(batch, length, self.d_inner) * jax.nn.silu(z.astype(jnp.float32))
        out = self.out_proj(self.norm(gated).astype(self.dtype))
        new_cache = None if cache is None else {"conv": new_conv.astype(cache["conv"].dtype), "ssm": ssm_state}
        return out, new_cache

    def discretize(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x: [B, T, D] -> Δ [B, T, H] float32 (> 0) and log-decay Δ·A, [B, T, H] or [B, T, H, N] float32 (< 0).

        softplus keeps Δ positive and A = −exp(A_log) keeps A negative, so a = exp(Δ·A) ∈ (0, 1) for any
        real input: the state never grows and never flips sign.
        """
        dt = jax.nn.softplus(self.dt_proj(x.astype(jnp.float32)) + self.dt_bias[...])
        a = -jnp.exp(self.A_log[...])
        log_a = dt * a if a.ndim == 1 else dt[..., None] * a
        return dt, log_a

    def _split_heads(self, xbc: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """xbc [B, T, d_inner + 2GN] -> x [B, T, H, P] and B, C [B, T, H, N] (each group's B, C broadcast
        to its H/G heads: shared, not duplicated parameters)."""
        batch, length = xbc.shape[:2]
        groups, n = self.num_groups, self.state_size
        xs, b, c = jnp.split(xbc, [self.d_inner, self.d_inner + groups * n], axis=-1)
        xs = xs.reshape(batch, length, self.num_heads, self.head_dim)
        per_group = self.num_heads // groups
        b = jnp.repeat(b.reshape(batch, length, groups, n), per_group, axis=2)
        c = jnp.repeat(c.reshape(batch, length, groups, n), per_group, axis=2)
        return xs, b, c

    def _ssd(
        self,
        x_dt: jax.Array,
        log_a: jax.Array,
        b: jax.Array,
        c: jax.Array,
        segment_ids: jax.Array | None,
        state: jax.Array | None,
    ) -> tuple[jax.Array, jax.Array]:
        """The SSD core: y [B, T, H, P] and the final state [B, H, P, N] float32.

        One decode token takes `ssd_step` (no chunk padding); everything else the chunked op, starting
        from the cached state when there is one.
        """
        if state is not None and x_dt.shape[1] == 1:
            y, new_state = ssd_step(x_dt[:, 0], log_a[:, 0], b[:, 0], c[:, 0], state=state)
            return y[:, None], new_state
        return ssd(
            x_dt, log_a, b, c, initial_state=state, segment_ids=segment_ids,
            chunk_size=self.options.chunk_size, implementation=self.options.implementation,
        )

    def _cache_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        """Shape of every cache entry: the single source for init_cache and its check."""
        return {
            "conv": (batch_size, self.options.conv_size - 1, self.conv_dim),
            "ssm": (batch_size, self.num_heads, self.head_dim, self.state_size),
        }

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
        """Empty cache: conv [B, K−1, d_inner + 2GN] in dtype (zeros = no previous input) and ssm
        [B, H, P, N] float32. Its size does not depend on max_len. Reads no parameters."""
        del max_len  # a recurrent state: constant size whatever the length
        shapes = self._cache_shapes(batch_size)
        return {"conv": jnp.zeros(shapes["conv"], dtype), "ssm": jnp.zeros(shapes["ssm"], jnp.float32)}
