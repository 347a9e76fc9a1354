"""SpikeNet , registered as model "spikenet": a spiking point-cloud classifier built from SVMT blocks.

Paper: "SpikeNet: Sparse Spike-Driven Mask Vector Transformer for Energy-Efficient and Stable Spiking Point
Cloud Processing" (ICML 2026). Its code was not public; the neuron follows SpikingJelly's multi-step LIF as the
Spiking Point Transformer uses it (`spikenet_neurons`), and the SVMT attention and the DSSR residual are
RECONSTRUCTIONS from the abstract (`spikenet_layers`, docs/papers/spikenet.md).

Network (widths d_model · 2^s for stages s = 0 .. num_layers - 1, e.g. 32-64-128-256):
    [p - centroid, features] fed at each of T steps -> stem (32) -> SVMT -> [transition-down -> SVMT] x (L-1)
    -> spikes averaged over real points and over T -> Linear -> logits [B, num_outputs].
Only relative coordinates enter (to the centroid, and p_i - p_j inside blocks), so the logits are invariant to
translations; FPS and k-NN are deterministic and start from a permutation-invariant seed, so they are invariant
to permuting the points. The model is not rotation-invariant (the out-of-group control). ModelConfig.num_heads
is unused: the vector mask is per channel.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.common import check_point_inputs, random_rotation, rotate_points
from icml26zoo.geometric.spikenet_geometry import knn, sorted_centroid
from icml26zoo.geometric.spikenet_layers import SpikeContext, SpikingStem, SVMTBlock, TransitionDown, time_broadcast
from icml26zoo.geometric.spikenet_neurons import LIFParams
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int

FIELD = MODEL_OPTIONS_FIELD


def _require(condition: bool, name: str, expected: str, value: object) -> None:
    if not condition:
        raise ValueError(f"{FIELD}: spikenet option {name!r} must be {expected}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SpikeNetOptions:
    """The spikenet model's options (ModelConfig.model_options)."""

    # Classes of the pooled readout.
    num_outputs: int = 8
    # Only "pool" (logits per example); per-point segmentation heads are not implemented.
    readout: Literal["pool", "point"] = "pool"
    # Feature channels F of the `features` input (0: coordinates only).
    feature_dim: int = 0
    # Time steps T of the direct encoding (the spec's small setting uses 2; 1 is allowed).
    time_steps: int = 2
    # Neighbours k of the vector attention and of the transition-down grouping.
    num_neighbors: int = 16
    # Farthest point sampling keeps N // downsample points at each transition-down.
    downsample: int = 4
    # LIF constants: membrane time constant, threshold (SPT's neuron-factory default 0.5), reset potential.
    tau: float = 2.0
    v_threshold: float = 0.5
    v_reset: float = 0.0
    # Slope of the sigmoid surrogate gradient (SpikingJelly's default 4).
    surrogate_alpha: float = 4.0
    # DSSR variant around each SVMT block: "gated" (b, spike-gated sparse residual) or "membrane" (a).
    dssr: Literal["gated", "membrane"] = "gated"

    def __post_init__(self) -> None:
        for name in ("num_outputs", "time_steps", "num_neighbors", "downsample", "feature_dim"):
            minimum = 0 if name == "feature_dim" else 1
            check_int(f"{FIELD}: spikenet option {name!r}", getattr(self, name), minimum=minimum)
        _require(self.tau > 1.0, "tau", "> 1 (tau <= 1 makes the leak overshoot)", self.tau)
        _require(self.v_threshold > self.v_reset, "v_threshold", f"> v_reset = {self.v_reset}", self.v_threshold)
        _require(self.surrogate_alpha > 0, "surrogate_alpha", "> 0", self.surrogate_alpha)
        _require(self.readout == "pool", "readout", "'pool' (spikenet has no per-point head)", self.readout)

    @property
    def lif(self) -> LIFParams:
        return LIFParams(tau=self.tau, v_threshold=self.v_threshold, v_reset=self.v_reset,
                         alpha=self.surrogate_alpha)


def spikenet_options(cfg: ModelConfig) -> SpikeNetOptions:
    """cfg.model_options as SpikeNetOptions; ValueError naming model.model_options."""
    return parse_model_options(SpikeNetOptions, cfg, owner="spikenet model")


@register_model("spikenet")
class SpikeNet(nnx.Module):
    """points [B, N, 3], features [B, N, F], weights [B, N] (0 = padding) -> logits [B, num_outputs] float32."""

    LANGUAGE_MODEL = False
    options_class = SpikeNetOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        self.options = spikenet_options(cfg)
        widths = [cfg.d_model * 2**stage for stage in range(cfg.num_layers)]
        opts = self.options
        self.stem = SpikingStem(3 + opts.feature_dim, widths[0], rngs=rngs)
        self.blocks = nnx.List([SVMTBlock(width, opts.dssr, f"svmt{s}", rngs=rngs) for s, width in enumerate(widths)])
        self.downs = nnx.List([
            TransitionDown(widths[s - 1], widths[s], opts.downsample, opts.num_neighbors, f"down{s}", rngs=rngs)
            for s in range(1, len(widths))
        ])
        self.head = nnx.Linear(widths[-1], opts.num_outputs, rngs=rngs)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        return self.forward(points, features, weights)[0]

    def firing_rates(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> dict[str, jax.Array]:
        """The firing rate of every neuron layer over the real points (name -> float32 scalar in [0, 1])."""
        return self.forward(points, features, weights, record_rates=True)[1]

    def forward(self, points: jax.Array, features: jax.Array, weights: jax.Array, *,
                record_rates: bool = False) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(logits [B, num_outputs], firing rates by layer name; empty unless record_rates)."""
        self._check_inputs(points, features, weights)
        ctx = SpikeContext(self.options.lif, {} if record_rates else None)
        mask = weights > 0
        centred = points - sorted_centroid(points, mask)[:, None, :]
        inputs = jnp.concatenate([centred, features.astype(points.dtype)], axis=-1)
        x = self.stem(time_broadcast(inputs, self.options.time_steps), mask, ctx)
        x = self._attend(0, x, points, mask, ctx)
        for stage, down in enumerate(self.downs, start=1):
            x, points, mask = down(x, points, mask, ctx)
            x = self._attend(stage, x, points, mask, ctx)
        spikes = ctx.fire(x, mask, "head.input")
        per_step = jnp.where(mask[None, :, :, None], spikes, 0.0)
        count = spikes.shape[0] * jnp.sum(mask, axis=1).astype(spikes.dtype)
        pooled = jnp.sum(per_step, axis=(0, 2)) / jnp.maximum(count, 1.0)[:, None]
        return self.head(pooled).astype(jnp.float32), ctx.rates or {}

    def _attend(self, stage: int, x: jax.Array, points: jax.Array, mask: jax.Array, ctx: SpikeContext) -> jax.Array:
        neighbors, valid = knn(points, points, mask, min(self.options.num_neighbors, points.shape[1]))
        valid = valid & mask[:, :, None]
        relative = points[:, :, None, :] - jax.vmap(lambda rows, idx: rows[idx])(points, neighbors)
        return self.blocks[stage](x, relative, neighbors, valid, mask, ctx)

    def _check_inputs(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> None:
        check_point_inputs(points, features, weights, dim=3)
        if features.shape[-1] != self.options.feature_dim:
            raise ValueError(f"features must have shape [B, N, {self.options.feature_dim}] (spikenet option "
                             f"feature_dim), got shape {list(features.shape)}")


@nnx.jit
def _forward_with_rates(model: SpikeNet, points: jax.Array, features: jax.Array,
                        weights: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    return model.forward(points, features, weights, record_rates=True)


def firing_rates(model: SpikeNet, points: jax.Array, features: jax.Array, weights: jax.Array) -> dict[str, float]:
    """The firing rate of every neuron layer on a batch (the spec's energy proxy): layer name -> rate in [0, 1].

    A rate is the fraction of spikes over time steps, real points (or their valid neighbours) and channels.
    Names: "stem", "svmt<s>.<neuron>" (input, q, k, v, pos_hidden, pos, gamma_hidden, mask, gate),
    "down<s>.input", "down<s>.hidden", "head.input".
    """
    check_point_inputs(points, features, weights, dim=3)
    rates = _forward_with_rates(model, points, features, weights)[1]
    return {name: float(rate) for name, rate in rates.items()}


def equivariance_errors(model: SpikeNet, points: jax.Array, features: jax.Array, weights: jax.Array,
                        key: jax.Array) -> dict[str, float]:
    """Max |logits(g · input) - logits(input)| for SpikeNet's symmetries and for a rotation outside them.

    points [B, N, 3], features [B, N, F], weights [B, N]. In-group transformations (the model is invariant to
    them): "permutation" (one random reordering of the points of every example, features and weights moved
    along) and "translation" (a random shift t ~ N(0, I) of every point; the model sees only relative
    coordinates). "in_group" is the larger of the two. "out_of_group": a random rotation about the origin:
    SpikeNet is not rotation-invariant, so this error is large; it is the control that the check can fail.

    Spikes are discontinuous: a float32 rounding of a membrane potential lying within rounding of V_th can flip
    one spike, so a translation (whose relative coordinates round differently) may rarely show an error far
    above rounding. Permutations are bitwise exact (sorted centroid sums, distance-ordered neighbours, FPS
    independent of the point order, spike counts pooled exactly).
    """
    check_point_inputs(points, features, weights, dim=3)
    perm_key, shift_key, rotation_key = jax.random.split(key, 3)
    order = jax.random.permutation(perm_key, points.shape[1])
    shift = jax.random.normal(shift_key, (points.shape[0], 1, 3), points.dtype)
    rotated = rotate_points(points, random_rotation(rotation_key))
    variants = [
        (points, features, weights),
        (points[:, order], features[:, order], weights[:, order]),
        (points + shift, features, weights),
        (rotated, features, weights),
    ]
    stacked = [jnp.concatenate(arrays, axis=0) for arrays in zip(*variants, strict=True)]
    logits = _forward_with_rates(model, *stacked)[0]
    base, permuted, translated, rotated_logits = jnp.split(logits, len(variants))
    errors = {
        "permutation": float(jnp.max(jnp.abs(permuted - base))),
        "translation": float(jnp.max(jnp.abs(translated - base))),
        "out_of_group": float(jnp.max(jnp.abs(rotated_logits - base))),
    }
    errors["in_group"] = max(errors["permutation"], errors["translation"])
    return errors
