"""The Platonic Transformer's layers (arXiv 2510.03511): group-convolution linear maps, group-rotated RoPE,
the two interaction modes (softmax attention and the linear-time dynamic group convolution), lifting and
read-out, and the pre-norm block.

Feature layout: every point carries a function on the group, x [B, N, G, C]: "frame g" is the point seen from
the reference frame R_g. The group acts on these features by permuting frames: rotating the input by R_a turns
frame g into the old frame a⁻¹g. Every map here commutes with that permutation:

* lifting expresses vectors in each frame (R_gᵀ v); scalars are copied to every frame;
* `PlatonicLinear` is the group convolution y_h = Σ_g K[g⁻¹h] x_g + b (one kernel per group element);
* RoPE angles in frame g are p · R_g ω (the position as seen from frame g);
* norms, biases and activations act on the channel axis C with parameters shared by the frames;
* read-out averages scalars over frames and rotates each frame's vectors back, (1/G) Σ_g R_g v^(g).

The maths follows the official PyTorch code (read for the spec, not copied); the JAX code is the zoo's own.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.geometric.common import masked_softmax
from icml26zoo.geometric.platonic_groups import platonic_group

ATTENTION_MODES = ("softmax", "linear")
FREQ_INITS = ("spiral", "random")


def group_elements(group: str, dtype: jnp.dtype) -> jax.Array:
    """The float64-generated matrices R_g of `group` as [G, 3, 3] in `dtype`."""
    return jnp.asarray(platonic_group(group).elements, dtype)


def kernel_indices(group: str) -> np.ndarray:
    """int32 [G, G]: index[h, g] = the element g⁻¹h, the kernel that maps input frame g to output frame h."""
    table = platonic_group(group)
    return table.cayley[table.inverse[None, :], np.arange(table.order)[:, None]]


class PlatonicLinear(nnx.Module):
    """Group-convolution linear map x [..., G, C_in] -> y [..., G, C_out]: y_h = Σ_g K[g⁻¹h] x_g + b.

    Kernel K [G, C_out, C_in] ~ N(0, 1/(G·C_in)) (the fan-in of the equivalent dense (G·C_out)×(G·C_in)
    matrix), bias b [C_out] ~ U(±1/√(G·C_in)), shared by all output frames.
    """

    def __init__(self, group: str, in_channels: int, out_channels: int, *, use_bias: bool = True,
                 rngs: nnx.Rngs) -> None:
        self.group = group
        order = platonic_group(group).order
        fan_in = order * in_channels
        std = 1.0 / math.sqrt(fan_in)
        self.kernel = nnx.Param(std * jax.random.normal(rngs.params(), (order, out_channels, in_channels), jnp.float32))
        self.bias = (nnx.Param(jax.random.uniform(rngs.params(), (out_channels,), jnp.float32, minval=-std, maxval=std))
                     if use_bias else None)

    def dense_weight(self, dtype: jnp.dtype = jnp.float32) -> jax.Array:
        """The equivalent dense weight W [G_out, C_out, G_in, C_in] with W[h, :, g, :] = K[g⁻¹h]."""
        return jnp.transpose(self.kernel[...].astype(dtype)[kernel_indices(self.group)], (0, 2, 1, 3))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., G, C_in] -> [..., G, C_out] in x.dtype."""
        order, out_channels, in_channels = self.kernel.shape
        if x.shape[-2:] != (order, in_channels):
            raise ValueError(f"x must end in [G, C_in] = {(order, in_channels)}, got shape {x.shape}")
        y = jnp.einsum("...gi,hogi->...ho", x, self.dense_weight(x.dtype))
        return y if self.bias is None else y + self.bias[...].astype(x.dtype)


def spiral_frequencies(num_heads: int, num_pairs: int, sigma: float) -> np.ndarray:
    """float32 [H, F, 3]: golden-angle (Fibonacci sphere) directions per frequency pair, a phase offset of
    2π h/H per head, magnitudes linearly spaced from σ/F to σ."""
    index = np.arange(num_pairs, dtype=np.float64) + 0.5
    height = 1.0 - 2.0 * index / num_pairs
    radius = np.sqrt(1.0 - height**2)
    phase = 2.0 * np.pi * np.arange(num_heads)[:, None] / num_heads
    angle = 2.0 * np.pi * index / ((1.0 + np.sqrt(5.0)) / 2.0) + phase
    directions = np.stack([radius * np.cos(angle), np.broadcast_to(height, angle.shape), radius * np.sin(angle)], -1)
    magnitudes = np.linspace(sigma / num_pairs, sigma, num_pairs)
    return (directions * magnitudes[None, :, None]).astype(np.float32)


def group_rope_angles(points: jax.Array, elements: jax.Array, freqs: jax.Array) -> jax.Array:
    """points [B, N, 3], elements [G, 3, 3], freqs [H, F, 3] -> angles [B, N, G, H, F] = p · R_g ω_{h,f}."""
    rotated = jnp.einsum("gde,hfe->ghfd", elements, freqs)
    return jnp.einsum("bnd,ghfd->bnghf", points, rotated)


def rotate_pairs(x: jax.Array, angles: jax.Array, *, inverse: bool = False) -> jax.Array:
    """Rotates each pair (x_{2f}, x_{2f+1}) of x [..., D] by angles [..., D/2] (by −angle when `inverse`)."""
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if inverse:
        sin = -sin
    even, odd = x[..., 0::2], x[..., 1::2]
    return jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(x.shape)


def softmax_interaction(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax attention with every (frame, head) an ordinary head, scores q_i·k_j / √D.

    q, k, v [B, N, G, H, D], mask [B, N] bool (False keys are never attended) -> [B, N, G, H, D].
    """
    scores = jnp.einsum("bighd,bjghd->bghij", q, k) / jnp.sqrt(jnp.asarray(q.shape[-1], q.dtype))
    probs = masked_softmax(scores, mask.astype(q.dtype)[:, None, None, None, :])
    return jnp.einsum("bghij,bjghd->bighd", probs, v)


def linear_interaction(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Linear-time dynamic group convolution: out_i = q_iᵀ (1/Z Σ_j k_j v_jᵀ), Z the number of real points.

    q, k, v [B, N, G, H, D], mask [B, N] bool -> [B, N, G, H, D]; the state is [B, G, H, D, D] per example.
    """
    real = mask.astype(q.dtype)[:, :, None, None, None]
    count = jnp.maximum(jnp.sum(mask, axis=1), 1).astype(q.dtype)[:, None, None, None, None]
    state = jnp.einsum("bjghd,bjghe->bghde", k * real, v * real) / count
    return jnp.einsum("bighd,bghde->bighe", q, state)


class PlatonicInteraction(nnx.Module):
    """Attention relative to frames: PlatonicLinear q, v (k = ones unless use_key), group-rotated RoPE,
    softmax or linear interaction, optional RoPE on values (rotate v_j by θ_j, un-rotate the output by θ_i),
    PlatonicLinear output projection. Heads: H_e per frame, D_h = C / H_e."""

    def __init__(self, group: str, channels: int, heads: int, *, attention: str, use_key: bool,
                 rope_on_values: bool, rope_sigma: float, freq_init: str, learned_freqs: bool,
                 rngs: nnx.Rngs) -> None:
        self.group, self.heads, self.head_dim = group, heads, channels // heads
        self.attention, self.use_key, self.rope_on_values = attention, use_key, rope_on_values
        self.q_proj = PlatonicLinear(group, channels, channels, rngs=rngs)
        self.v_proj = PlatonicLinear(group, channels, channels, rngs=rngs)
        self.k_proj = PlatonicLinear(group, channels, channels, rngs=rngs) if use_key else None
        self.out_proj = PlatonicLinear(group, channels, channels, rngs=rngs)
        pairs = self.head_dim // 2
        if freq_init == "spiral":
            freqs = jnp.asarray(spiral_frequencies(heads, pairs, rope_sigma))
        else:
            freqs = rope_sigma * jax.random.normal(rngs.params(), (heads, pairs, 3), jnp.float32)
        self.freqs = nnx.Param(freqs) if learned_freqs else nnx.Variable(freqs)

    def __call__(self, x: jax.Array, points: jax.Array, mask: jax.Array) -> jax.Array:
        """x [B, N, G, C], points [B, N, 3], mask [B, N] bool -> [B, N, G, C]."""
        split = lambda t: t.reshape(*t.shape[:-1], self.heads, self.head_dim)
        q, v = split(self.q_proj(x)), split(self.v_proj(x))
        k = split(self.k_proj(x)) if self.use_key else jnp.ones_like(q)
        angles = group_rope_angles(points, group_elements(self.group, x.dtype), self.freqs[...].astype(x.dtype))
        q, k = rotate_pairs(q, angles), rotate_pairs(k, angles)
        if self.rope_on_values:
            v = rotate_pairs(v, angles)
        interact = softmax_interaction if self.attention == "softmax" else linear_interaction
        out = interact(q, k, v, mask)
        if self.rope_on_values:
            out = rotate_pairs(out, angles, inverse=True)
        return self.out_proj(out.reshape(x.shape))


def gelu(x: jax.Array) -> jax.Array:
    """The exact GELU x·Φ(x) = x·(1 + erf(x/√2))/2, elementwise (any shape). The official code uses torch's
    F.gelu, whose default is this erf form; jax.nn.gelu defaults to the tanh approximation instead."""
    return jax.nn.gelu(x, approximate=False)


class PlatonicBlock(nnx.Module):
    """Pre-norm block: x + interaction(LN(x)), then x + FFN(LN(x)) with FFN = PlatonicLinear(C -> m·C), exact
    (erf) GELU, PlatonicLinear(m·C -> C). LayerNorms act on the channel axis C with scale and bias [C] shared
    by frames."""

    def __init__(self, group: str, channels: int, heads: int, *, ffn_multiplier: int, rngs: nnx.Rngs,
                 **interaction: object) -> None:
        self.norm1 = nnx.LayerNorm(channels, epsilon=1e-5, rngs=rngs)
        self.interaction = PlatonicInteraction(group, channels, heads, rngs=rngs, **interaction)
        self.norm2 = nnx.LayerNorm(channels, epsilon=1e-5, rngs=rngs)
        self.ffn_in = PlatonicLinear(group, channels, ffn_multiplier * channels, rngs=rngs)
        self.ffn_out = PlatonicLinear(group, ffn_multiplier * channels, channels, rngs=rngs)

    def __call__(self, x: jax.Array, points: jax.Array, mask: jax.Array) -> jax.Array:
        """x [B, N, G, C], points [B, N, 3], mask [B, N] bool -> [B, N, G, C]."""
        x = x + self.interaction(self.norm1(x), points, mask)
        return x + self.ffn_out(gelu(self.ffn_in(self.norm2(x))))


def lift(scalars: jax.Array, vectors: jax.Array | None, elements: jax.Array) -> jax.Array:
    """scalars [B, N, S], vectors [B, N, V, 3] or None, elements [G, 3, 3] -> [B, N, G, S + 3V]: scalars copied
    to every frame, vectors expressed in frame g as R_gᵀ v."""
    order = elements.shape[0]
    lifted = [jnp.broadcast_to(scalars[:, :, None, :], (*scalars.shape[:2], order, scalars.shape[-1]))]
    if vectors is not None:
        in_frames = jnp.einsum("gji,bncj->bngci", elements, vectors)
        lifted.append(in_frames.reshape(*in_frames.shape[:3], -1))
    return jnp.concatenate(lifted, axis=-1)


def readout_scalars(x: jax.Array) -> jax.Array:
    """x [..., G, S] -> [..., S]: the mean over frames (invariant)."""
    return jnp.mean(x, axis=-2)


def readout_vectors(x: jax.Array, elements: jax.Array) -> jax.Array:
    """x [..., G, 3V], elements [G, 3, 3] -> [..., V, 3]: (1/G) Σ_g R_g v^(g) (equivariant)."""
    per_frame = x.reshape(*x.shape[:-1], x.shape[-1] // 3, 3)
    return jnp.einsum("gij,...gcj->...ci", elements, per_frame) / elements.shape[0]
