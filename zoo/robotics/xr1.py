"""XR-1 stage 1 (arXiv 2511.02776): the dual-branch VQ-VAE that learns Unified Vision-Motion Codes, scaled down.

Structure from the official code (Open-X-Humanoid/XR-1, `modeling_xr1_stage1.py`, `cross_stage_module.py`),
rewritten in Flax NNX at the spec's "small zoo model" sizes:

- vision branch: a trainable patch-ViT stands in for the frozen SigLIP tower (condition and target frames
  [B, S, S, 3] -> patch features [B, P, W]); the M-Former reads [Q learnable query tokens, condition patches,
  a separator, target patches] with position and token-type embeddings and keeps the Q query outputs; a
  down-resampler (Linear, tanh, Linear) maps them to the vision VQ; an up-resampler and a ViT decoder over the
  condition frame's patches and the Q motion tokens predict the target frame.
- action branch: Linear -> causal residual temporal convolutions (left padding; downsampling keeps the last
  step of each block so token j sees steps <= (j+1)·stride − 1) -> sinusoidal positions -> causal transformer
  -> Linear -> action VQ (its own codebook, or the vision codebook with `shared_codebook`); tokens are linearly
  resampled to Q when their count differs.
- action decoder: a flow-matching head over [Q motion tokens, T noisy-action + time tokens]; the prefix attends
  only to itself, the action tokens to everything. x_τ = τ ε + (1 − τ) A, target ε − A, τ = 1 is noise.
- losses: legacy-β VQ losses of both branches, pixel MSE, flow-matching MSE, and kl_weight · KL(P_action ‖
  P_vision) with P = softmax over the channels of each quantised token; samples without actions (human video)
  contribute only the vision terms.

Deviations (stated): no SigLIP (a small trainable ViT), no LPIPS, no robot state in the action decoder, no
dropout, and the image decoder predicts the target frame as the condition frame plus a residual (`residual`),
so the copy-the-condition-frame baseline is its zero output.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.validation import check_bool, check_float_array, check_int, check_non_negative
from icml26zoo.vq import VectorQuantizer, VQOutput, check_codebook_size

__all__ = ["XR1", "XR1Config", "XR1Output", "causal_mask", "check_batch", "host_normal", "kl_alignment",
           "sinusoidal_positions"]


@dataclasses.dataclass(frozen=True)
class XR1Config:
    """Sizes of the small model (defaults: the spec's small zoo model)."""

    image_size: int = 32
    patch: int = 4
    width: int = 128
    heads: int = 4
    vit_layers: int = 4
    mformer_layers: int = 2
    decoder_layers: int = 2
    num_queries: int = 8
    codebook_size: int = 64
    code_dim: int = 32
    chunk: int = 16
    action_dim: int = 4
    action_layers: int = 2
    downsample: int = 2
    head_layers: int = 2
    shared_codebook: bool = False
    beta: float = 0.25
    kl_weight: float = 10.0
    residual: bool = True

    def __post_init__(self) -> None:
        for name in ("image_size", "patch", "width", "heads", "mformer_layers", "decoder_layers",
                     "num_queries", "code_dim", "chunk", "action_dim", "action_layers", "downsample", "head_layers"):
            check_int(name, getattr(self, name))
        check_int("vit_layers", self.vit_layers, minimum=0)  # 0: patch embedding only
        check_codebook_size(self.codebook_size, "codebook_size")
        check_non_negative("beta", self.beta, finite=True)
        check_non_negative("kl_weight", self.kl_weight, finite=True)
        check_bool("shared_codebook", self.shared_codebook)
        check_bool("residual", self.residual)
        if self.image_size % self.patch:
            raise ValueError(f"image_size must be a multiple of patch {self.patch}, got {self.image_size}")
        if self.width % self.heads:
            raise ValueError(f"width must be a multiple of heads {self.heads}, got {self.width}")
        if self.chunk % self.downsample:
            raise ValueError(f"chunk must be a multiple of downsample {self.downsample}, got {self.chunk}")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch) ** 2


def host_normal(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32, *,
                scale: float | None = None) -> jax.Array:
    """Normal(0, scale²) weights drawn on the host from a numpy generator seeded by `key`'s data; scale defaults to
    1/sqrt(fan in) (LeCun). Why: jax.random's initialisers compile one XLA program per parameter shape, which
    costs seconds per model on a CPU; drawing with numpy costs none. Under a trace (the shared trainer builds its
    model inside `jax.jit` and `eval_shape`) the key has no value on the host: the weights are drawn by jax.random
    from the same distribution, inside the one compiled init program."""
    std = scale if scale is not None else 1.0 / math.sqrt(max(int(np.prod(shape[:-1])), 1))
    if isinstance(key, jax.core.Tracer):
        return (std * jax.random.normal(key, shape, jnp.float32)).astype(dtype)
    seed = np.asarray(jax.random.key_data(key)).astype(np.uint64).ravel()
    return jnp.asarray(np.random.default_rng(seed).normal(scale=std, size=shape), dtype)


def _embedding(rngs: nnx.Rngs, *shape: int) -> nnx.Param:
    return nnx.Param(host_normal(rngs.params(), shape, scale=0.02))


def _linear(a: int, b: int, rngs: nnx.Rngs, **kwargs: Any) -> nnx.Linear:
    return nnx.Linear(a, b, kernel_init=kwargs.pop("kernel_init", host_normal), rngs=rngs, **kwargs)


def causal_mask(length: int) -> jax.Array:
    """[length, length] bool: query i may attend to key j iff j <= i."""
    return jnp.tril(jnp.ones((length, length), bool))


def sinusoidal_positions(length: int, width: int) -> jax.Array:
    """[length, width] fixed sine/cosine position encoding (Transformer paper)."""
    position = jnp.arange(length, dtype=jnp.float32)[:, None]
    frequency = jnp.exp(-math.log(10000.0) * jnp.arange(0, width, 2, dtype=jnp.float32) / width)
    table = jnp.zeros((length, width), jnp.float32)
    table = table.at[:, 0::2].set(jnp.sin(position * frequency))
    return table.at[:, 1::2].set(jnp.cos(position * frequency)[:, : width // 2])


def kl_alignment(action_tokens: jax.Array, vision_tokens: jax.Array, weights: jax.Array) -> jax.Array:
    """Mean over weighted samples and tokens of KL(softmax(action) ‖ softmax(vision)) over the channel axis.

    action_tokens, vision_tokens [B, Q, D]; weights [B] (0 drops a sample, e.g. human video). Returns a scalar
    >= 0, 0 when the two token sets are equal.
    """
    log_p = jax.nn.log_softmax(action_tokens, axis=-1)
    log_q = jax.nn.log_softmax(vision_tokens, axis=-1)
    per_token = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)  # [B, Q]
    total = jnp.sum(weights[:, None] * per_token)
    return total / jnp.maximum(jnp.sum(weights) * action_tokens.shape[1], 1.0)


def check_batch(config: XR1Config, condition: Any, target: Any, actions: Any, has_actions: Any) -> None:
    """Checks a host batch before it enters a jitted step: frames [B, S, S, 3], actions [B, T, A], has_actions
    [B] float, every value finite; ValueError naming the argument otherwise."""
    s = config.image_size
    b = check_float_array("condition", condition, (None, s, s, 3), "[B, S, S, 3]")[0]
    check_float_array("target", target, (b, s, s, 3), "[B, S, S, 3]")
    check_float_array("actions", actions, (b, config.chunk, config.action_dim), "[B, T, A]")
    check_float_array("has_actions", has_actions, (b,), "[B]")
    for name, value in (("condition", condition), ("target", target), ("actions", actions),
                        ("has_actions", has_actions)):
        if not np.all(np.isfinite(np.asarray(value))):
            raise ValueError(f"{name} must be finite, got {int(np.sum(~np.isfinite(np.asarray(value))))} "
                             "NaN or infinite values")


class Block(nnx.Module):
    """Pre-norm transformer block: x [B, N, W], optional bool mask [N, N] (True = may attend) -> [B, N, W]."""

    def __init__(self, width: int, heads: int, *, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.norm1, self.norm2 = nnx.LayerNorm(width, rngs=rngs), nnx.LayerNorm(width, rngs=rngs)
        self.qkv, self.out = _linear(width, 3 * width, rngs=rngs), _linear(width, width, rngs=rngs)
        self.fc1, self.fc2 = _linear(width, 4 * width, rngs=rngs), _linear(4 * width, width, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        batch, length, width = x.shape
        q, k, v = jnp.split(self.qkv(self.norm1(x)).reshape(batch, length, 3 * self.heads, -1), 3, axis=2)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(width // self.heads)
        if mask is not None:
            logits = jnp.where(mask, logits, -1e30)
        attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v).reshape(batch, length, width)
        x = x + self.out(attended)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.norm2(x))))


def _stack(count: int, width: int, heads: int, rngs: nnx.Rngs) -> nnx.List:
    return nnx.List([Block(width, heads, rngs=rngs) for _ in range(count)])


def _resampler(a: int, b: int, c: int, rngs: nnx.Rngs) -> nnx.Sequential:
    return nnx.Sequential(_linear(a, b, rngs=rngs), jnp.tanh, _linear(b, c, rngs=rngs))


def patchify(images: jax.Array, patch: int) -> jax.Array:
    """[B, S, S, C] -> [B, (S/p)², p·p·C] (row-major patches)."""
    b, s, _, c = images.shape
    n = s // patch
    return images.reshape(b, n, patch, n, patch, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, n * n, -1)


def unpatchify(patches: jax.Array, patch: int, channels: int = 3) -> jax.Array:
    """[B, n², p·p·C] -> [B, n·p, n·p, C] (inverse of patchify)."""
    b, count, _ = patches.shape
    n = math.isqrt(count)
    return patches.reshape(b, n, n, patch, patch, channels).transpose(0, 1, 3, 2, 4, 5).reshape(
        b, n * patch, n * patch, channels)


class PatchViT(nnx.Module):
    """The SigLIP stand-in: images [B, S, S, 3] -> patch features [B, P, W] (linear patch embedding, learned
    positions, `layers` bidirectional blocks, final LayerNorm)."""

    def __init__(self, config: XR1Config, layers: int, *, rngs: nnx.Rngs) -> None:
        self.patch = config.patch
        self.embed = _linear(config.patch**2 * 3, config.width, rngs=rngs)
        self.position = _embedding(rngs, config.num_patches, config.width)
        self.blocks = _stack(layers, config.width, config.heads, rngs)
        self.norm = nnx.LayerNorm(config.width, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = self.embed(patchify(images, self.patch)) + self.position[...]
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class CausalConv(nnx.Module):
    """Residual causal temporal conv: x [B, T, W] -> [B, T/stride, W]. Left padding keeps output t from seeing
    inputs after t; downsampling keeps every stride-th output ending a block, so token j sees steps
    <= (j+1)·stride − 1."""

    def __init__(self, width: int, kernel: int, stride: int, *, rngs: nnx.Rngs) -> None:
        self.stride = stride
        self.conv = nnx.Conv(width, width, kernel_size=(kernel,), padding=((kernel - 1, 0),), kernel_init=host_normal,
                             rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x + self.conv(jax.nn.gelu(self.norm(x)))
        return y[:, self.stride - 1::self.stride]


@dataclasses.dataclass(frozen=True)
class XR1Output:
    """Everything one stage-1 forward pass produces (a pytree).

    vision_vq, action_vq: VQOutput (quantized [B, Q, D], indices [B, Q]); reconstruction [B, S, S, 3];
    losses: {"vq_vision", "vq_action", "image_mse", "action_flow", "kl", "total"} scalars.
    """

    vision_vq: VQOutput
    action_vq: VQOutput
    reconstruction: jax.Array
    losses: dict


jax.tree_util.register_dataclass(XR1Output, data_fields=["vision_vq", "action_vq", "reconstruction", "losses"],
                                 meta_fields=[])


class XR1(nnx.Module):
    """The stage-1 dual-branch VQ-VAE (module docstring)."""

    def __init__(self, config: XR1Config, *, rngs: nnx.Rngs) -> None:
        if not isinstance(config, XR1Config):
            raise ValueError(f"config must be an XR1Config, got {type(config).__name__}")
        c = self.config = config
        w = c.width
        # vision branch
        self.features = PatchViT(c, c.vit_layers, rngs=rngs)
        self.queries = _embedding(rngs, c.num_queries, w)
        self.separator = _embedding(rngs, 1, w)
        self.mformer_position = _embedding(rngs, c.num_queries + 2 * c.num_patches + 1, w)
        self.token_type = _embedding(rngs, 4, w)  # query, cond, sep, target
        self.mformer = _stack(c.mformer_layers, w, c.heads, rngs)
        self.down = _resampler(w, w, c.code_dim, rngs)
        self.vision_vq = VectorQuantizer(c.codebook_size, c.code_dim, commitment_cost=c.beta, legacy=True, rngs=rngs)
        self.up = _resampler(c.code_dim, c.code_dim, w, rngs)
        self.decoder_embed = PatchViT(c, 0, rngs=rngs)
        self.decoder = _stack(c.decoder_layers, w, c.heads, rngs)
        self.decoder_norm = nnx.LayerNorm(w, rngs=rngs)
        # zero-initialised so the residual decoder starts as the copy-the-condition-frame baseline
        self.to_pixels = _linear(w, c.patch**2 * 3, kernel_init=nnx.initializers.zeros, rngs=rngs)
        # action branch
        self.action_in = _linear(c.action_dim, w, rngs=rngs)
        self.convs = nnx.List([CausalConv(w, 5, 1, rngs=rngs), CausalConv(w, 3, c.downsample, rngs=rngs),
                               CausalConv(w, 3, 1, rngs=rngs)])
        self.action_encoder = _stack(c.action_layers, w, c.heads, rngs)
        self.action_norm = nnx.LayerNorm(w, rngs=rngs)
        self.action_out = _linear(w, c.code_dim, rngs=rngs)
        self.action_vq = None if c.shared_codebook else VectorQuantizer(
            c.codebook_size, c.code_dim, commitment_cost=c.beta, legacy=True, rngs=rngs)
        # flow-matching action decoder
        self.head_prefix = _linear(c.code_dim, w, rngs=rngs)
        self.head_action = _linear(c.action_dim, w, rngs=rngs)
        self.head_time = _linear(w, w, rngs=rngs)
        self.head_position = _embedding(rngs, c.num_queries + c.chunk, w)
        self.head = _stack(c.head_layers, w, c.heads, rngs)
        self.head_norm = nnx.LayerNorm(w, rngs=rngs)
        self.head_out = _linear(w, c.action_dim, rngs=rngs)

    # -- input checks -------------------------------------------------------------------------------------------
    def check_frames(self, field: str, frames: jax.Array, batch: int | None = None) -> None:
        s = self.config.image_size
        check_float_array(field, frames, (batch, s, s, 3), "[B, S, S, 3]")

    def check_actions(self, actions: jax.Array, batch: int | None = None) -> None:
        check_float_array("actions", actions, (batch, self.config.chunk, self.config.action_dim), "[B, T, A]")

    # -- vision branch ------------------------------------------------------------------------------------------
    def encode_vision(self, condition: jax.Array, target: jax.Array) -> jax.Array:
        """condition, target [B, S, S, 3] -> pre-quantisation motion tokens [B, Q, code_dim]."""
        c = self.config
        cond, targ = self.features(condition), self.features(target)
        b = cond.shape[0]
        types = jnp.repeat(jnp.arange(4), jnp.array([c.num_queries, c.num_patches, 1, c.num_patches]),
                           total_repeat_length=c.num_queries + 2 * c.num_patches + 1)
        x = jnp.concatenate([jnp.broadcast_to(self.queries[...], (b, c.num_queries, c.width)), cond,
                             jnp.broadcast_to(self.separator[...], (b, 1, c.width)), targ], axis=1)
        x = x + self.mformer_position[...] + self.token_type[...][types]
        for block in self.mformer:
            x = block(x)
        return self.down(x[:, : c.num_queries])

    def decode_vision(self, condition: jax.Array, motion: jax.Array) -> jax.Array:
        """condition [B, S, S, 3], quantised motion tokens [B, Q, code_dim] -> target frame [B, S, S, 3]."""
        c = self.config
        x = jnp.concatenate([self.decoder_embed(condition), self.up(motion)], axis=1)
        for block in self.decoder:
            x = block(x)
        pixels = unpatchify(self.to_pixels(self.decoder_norm(x[:, : c.num_patches])), c.patch)
        return condition + pixels if c.residual else pixels

    # -- action branch ------------------------------------------------------------------------------------------
    def encode_actions(self, actions: jax.Array) -> jax.Array:
        """actions [B, T, A] -> causal pre-quantisation tokens [B, Q, code_dim] (resampled to Q if needed)."""
        c = self.config
        x = self.action_in(actions)
        for conv in self.convs:
            x = conv(x)
        x = x + sinusoidal_positions(x.shape[1], c.width)
        mask = causal_mask(x.shape[1])
        for block in self.action_encoder:
            x = block(x, mask)
        z = self.action_out(self.action_norm(x))
        if z.shape[1] != c.num_queries:  # as the official code: linear interpolation along the token axis
            z = jax.image.resize(z, (z.shape[0], c.num_queries, z.shape[2]), "linear")
        return z

    def quantize_actions(self, z: jax.Array, weights: jax.Array) -> VQOutput:
        vq = self.vision_vq if self.action_vq is None else self.action_vq
        return vq(z, jnp.broadcast_to(weights[:, None], z.shape[:2]))

    def velocity(self, motion: jax.Array, noisy: jax.Array, tau: jax.Array) -> jax.Array:
        """Flow head: motion tokens [B, Q, code_dim], x_τ [B, T, A], τ [B] -> velocity [B, T, A]."""
        c = self.config
        time = jax.nn.silu(self.head_time(_time_embedding(tau, c.width)))
        x = jnp.concatenate([self.head_prefix(motion), self.head_action(noisy) + time[:, None]], axis=1)
        x = x + self.head_position[...]
        q = c.num_queries
        # prefix attends to the prefix; action tokens attend to everything
        mask = jnp.where(jnp.arange(q + c.chunk)[:, None] < q, jnp.arange(q + c.chunk)[None] < q, True)
        for block in self.head:
            x = block(x, mask)
        return self.head_out(self.head_norm(x[:, q:]))

    def sample_actions(self, motion: jax.Array, key: jax.Array, steps: int = 10) -> jax.Array:
        """Euler integration of the flow head from τ = 1 (noise) to τ = 0: motion [B, Q, D] -> actions [B, T, A]."""
        check_int("steps", steps)
        c = self.config
        x = jax.random.normal(key, (motion.shape[0], c.chunk, c.action_dim))
        dt = 1.0 / steps

        def euler(i: jax.Array, x: jax.Array) -> jax.Array:  # a loop, not unrolled: one velocity call to compile
            tau = jnp.full((motion.shape[0],), 1.0 - i * dt)
            return x - dt * self.velocity(motion, x, tau)

        return jax.lax.fori_loop(0, steps, euler, x)

    # -- stage-1 pass -------------------------------------------------------------------------------------------
    def __call__(self, condition: jax.Array, target: jax.Array, actions: jax.Array, has_actions: jax.Array,
                 key: jax.Array, kl_weight: jax.Array | float | None = None) -> XR1Output:
        """condition, target [B, S, S, 3]; actions [B, T, A] (ignored where has_actions is 0); has_actions [B]
        (1 robot, 0 vision-only); key draws the flow noise and times; kl_weight overrides config.kl_weight (it may
        be a traced scalar, so one compiled step serves several weights). Returns XR1Output."""
        self.check_frames("condition", condition)
        b = condition.shape[0]
        self.check_frames("target", target, b)
        self.check_actions(actions, b)
        check_float_array("has_actions", has_actions, (b,), "[B]")
        c = self.config
        weights = has_actions.astype(jnp.float32)
        vision = self.vision_vq(self.encode_vision(condition, target))
        reconstruction = self.decode_vision(condition, vision.quantized)
        # vision-only rows see zero actions so nothing they hold reaches the action branch
        actions = jnp.where(weights[:, None, None] > 0, actions, 0.0)
        action = self.quantize_actions(self.encode_actions(actions), weights)
        noise_key, time_key = jax.random.split(key)
        noise = jax.random.normal(noise_key, actions.shape)
        # τ ~ Beta(1.5, 1) by inversion (its CDF is τ^1.5): exact, and avoids compiling jax's gamma sampler
        tau = jax.random.uniform(time_key, (b,)) ** (1.0 / 1.5) * 0.999 + 0.001
        noisy = tau[:, None, None] * noise + (1 - tau[:, None, None]) * actions
        error = jnp.mean(jnp.square(self.velocity(action.quantized, noisy, tau) - (noise - actions)), axis=(1, 2))
        flow = jnp.sum(weights * error) / jnp.maximum(jnp.sum(weights), 1.0)
        kl = kl_alignment(action.quantized, vision.quantized, weights)
        losses = {"vq_vision": vision.loss, "vq_action": action.loss,
                  "image_mse": jnp.mean(jnp.square(reconstruction - target)), "action_flow": flow, "kl": kl}
        weight = c.kl_weight if kl_weight is None else kl_weight
        losses["total"] = sum(losses.values()) - kl + weight * kl
        return XR1Output(vision, action, reconstruction, losses)


def _time_embedding(tau: jax.Array, width: int) -> jax.Array:
    """τ [B] -> [B, width] sines and cosines of τ at geometric frequencies."""
    frequency = jnp.exp(-math.log(1000.0) * jnp.arange(width // 2, dtype=jnp.float32) / (width // 2))
    angles = 1000.0 * tau[:, None] * frequency
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=1)[:, :width]
