"""SpikeNet's layers : the spiking stem, the SVMT block with its DSSR residual, transition-down.

Every tensor on the spiking path is time-first, [T, B, N, C] (neighbour tensors [T, B, N, k, C]). Each weight
layer is followed by a norm over channels: the spec's BatchNorm over the time-folded batch [T·B] keeps running
statistics, which the zoo trainer's pure step (parameters only) cannot carry, and normalizing with batch
statistics would make an example's logits depend on the other examples of its batch (padding rows included),
so the zoo uses LayerNorm over the channels of each (t, b, point) instead: deterministic and per example.
Unlike inference-time BatchNorm, LayerNorm cannot be folded into the weights; that is the one place where
real-valued products remain on the spiking path.

`SpikeContext` carries the neuron constants and, when asked, collects each neuron layer's firing rate (the
spec's energy proxy) under a unique name.

SVMT (spiking vector-mask transformer) and DSSR (dynamic sparse spiking residual) are RECONSTRUCTIONS: no
SpikeNet code was public. SVMT replaces the per-channel softmax of Point Transformer v1's vector attention by
a binary spike mask M_ij = SN(LN(gamma(q_i - k_j + delta_ij))) in {0,1}^C and averages
M_ij ⊙ (v_j + delta_ij) over the k neighbours; with q, k, v and delta spikes, the mask only selects.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.spikenet_geometry import farthest_point_sampling, gather_points, knn
from icml26zoo.geometric.spikenet_neurons import LIFParams, masked_rate, multistep_lif

DSSR_VARIANTS = ("gated", "membrane")


@dataclasses.dataclass
class SpikeContext:
    """Neuron constants for one forward pass; `rates` (when not None) collects name -> firing rate scalars."""

    lif: LIFParams
    rates: dict[str, jax.Array] | None = None

    def fire(self, inputs: jax.Array, mask: jax.Array, name: str) -> jax.Array:
        """Inputs [T, B, *S, C] -> spikes of the multi-step LIF, recording their rate over mask [B, *S] (bool)."""
        spikes = multistep_lif(inputs, self.lif)
        if self.rates is not None:
            self.rates[name] = masked_rate(spikes, mask)
        return spikes


class LinearNorm(nnx.Module):
    """x [..., C_in] -> LayerNorm(W x + b) [..., C_out]: the zoo's stand-in for the spec's conv + BN pair."""

    def __init__(self, in_features: int, out_features: int, *, rngs: nnx.Rngs, use_bias: bool = True) -> None:
        self.linear = nnx.Linear(in_features, out_features, use_bias=use_bias, rngs=rngs)
        self.norm = nnx.LayerNorm(out_features, rngs=rngs)

    def __call__(self, inputs: jax.Array) -> jax.Array:
        return self.norm(self.linear(inputs))


def time_broadcast(values: jax.Array, time_steps: int) -> jax.Array:
    """Direct encoding: the same real-valued input [*S] fed at every step -> [T, *S]."""
    return jnp.broadcast_to(values[None], (time_steps, *values.shape))


class SpikingStem(nnx.Module):
    """Point embedding with the membrane-shortcut residual (DSSR variant a), as the spec places it in the stem.

    inputs [T, B, N, F_in] -> x [T, B, N, C] with x = e + LN(W SN(e)), e = LN(W_in inputs).
    """

    def __init__(self, in_features: int, width: int, *, rngs: nnx.Rngs) -> None:
        self.embed = LinearNorm(in_features, width, rngs=rngs)
        self.shortcut = LinearNorm(width, width, rngs=rngs)

    def __call__(self, inputs: jax.Array, mask: jax.Array, ctx: SpikeContext) -> jax.Array:
        embedded = self.embed(inputs)
        return embedded + self.shortcut(ctx.fire(embedded, mask, "stem"))


def vector_mask_aggregate(mask: jax.Array, values: jax.Array, neighbor_valid: jax.Array) -> jax.Array:
    """SVMT's aggregation: y_i = (1/k_i) Σ_j M_ij ⊙ values_ij over the valid neighbours j of point i.

    mask M [T, B, N, k, C] with entries in {0, 1} (spikes), values [T, B, N, k, C], neighbor_valid [B, N, k]
    bool, k_i = the number of valid neighbours of i -> y [T, B, N, C]. M ⊙ values is a select (M is binary);
    it is written as a product so that the surrogate gradient reaches the mask's neurons.
    """
    selected = jnp.where(neighbor_valid[None, :, :, :, None], mask * values, 0.0)
    count = jnp.sum(neighbor_valid, axis=-1).astype(values.dtype)
    return jnp.sum(selected, axis=3) / jnp.maximum(count, 1.0)[None, :, :, None]


class SVMTBlock(nnx.Module):
    """Spiking vector-mask attention over k-NN neighbours with a DSSR residual (RECONSTRUCTION).

    x [T, B, N, C] (real membrane stream), relative positions p_i - p_j [B, N, k, 3], neighbour index
    [B, N, k], valid [B, N, k], point mask [B, N] -> x + R [T, B, N, C], where R is LN(W_o y) (dssr
    "membrane", variant a) or G ⊙ LN(W_o y) with the binary gate G = SN(LN(W_g SN(x))) (dssr "gated",
    variant b: channels whose gate is off get no residual update).
    """

    def __init__(self, width: int, dssr: str, name: str, *, rngs: nnx.Rngs) -> None:
        if dssr not in DSSR_VARIANTS:
            raise ValueError(f"dssr must be one of {list(DSSR_VARIANTS)}, got {dssr!r}")
        self.dssr = dssr
        self.name = name
        self.query, self.key, self.value = (LinearNorm(width, width, rngs=rngs) for _ in range(3))
        self.position_in = LinearNorm(3, width, rngs=rngs)
        self.position_out = LinearNorm(width, width, rngs=rngs)
        self.gamma_in = LinearNorm(width, width, rngs=rngs)
        self.gamma_out = LinearNorm(width, width, rngs=rngs)
        self.output = LinearNorm(width, width, rngs=rngs)
        self.gate = LinearNorm(width, width, rngs=rngs) if dssr == "gated" else None

    def position_spikes(self, relative: jax.Array, valid: jax.Array, ctx: SpikeContext, time_steps: int) -> jax.Array:
        """delta_ij = SN(LN(W SN(LN(W (p_i - p_j))))): relative [B, N, k, 3] -> spikes [T, B, N, k, C]."""
        hidden = ctx.fire(time_broadcast(self.position_in(relative), time_steps), valid, f"{self.name}.pos_hidden")
        return ctx.fire(self.position_out(hidden), valid, f"{self.name}.pos")

    def vector_mask(self, relation: jax.Array, valid: jax.Array, ctx: SpikeContext) -> jax.Array:
        """M_ij = SN(LN(gamma(q_i - k_j + delta_ij))), gamma a 2-layer MLP with a spiking neuron between."""
        hidden = ctx.fire(self.gamma_in(relation), valid, f"{self.name}.gamma_hidden")
        return ctx.fire(self.gamma_out(hidden), valid, f"{self.name}.mask")

    def __call__(self, x: jax.Array, relative: jax.Array, neighbors: jax.Array, valid: jax.Array,
                 mask: jax.Array, ctx: SpikeContext) -> jax.Array:
        time_steps = x.shape[0]
        spikes = ctx.fire(x, mask, f"{self.name}.input")
        query = ctx.fire(self.query(spikes), mask, f"{self.name}.q")
        key = ctx.fire(self.key(spikes), mask, f"{self.name}.k")
        value = ctx.fire(self.value(spikes), mask, f"{self.name}.v")
        gather = jax.vmap(gather_points, in_axes=(0, None))
        delta = self.position_spikes(relative, valid, ctx, time_steps)
        relation = query[:, :, :, None, :] - gather(key, neighbors) + delta
        vector_mask = self.vector_mask(relation, valid, ctx)
        attended = vector_mask_aggregate(vector_mask, gather(value, neighbors) + delta, valid)
        update = self.output(attended)
        if self.gate is not None:
            update = ctx.fire(self.gate(spikes), mask, f"{self.name}.gate") * update
        return x + update


class TransitionDown(nnx.Module):
    """FPS to N/ratio points, k-NN grouping, a shared spiking MLP and max-pooling over each group.

    x [T, B, N, C], points [B, N, 3], mask [B, N] -> (x' [T, B, M, C'], centres [B, M, 3], mask' [B, M]) with
    x'_i = max_j LN(W_2 SN(LN(W_s SN(x_j) + W_p (p_j - c_i)))) over the valid neighbours j of centre c_i.
    """

    def __init__(self, in_width: int, out_width: int, ratio: int, num_neighbors: int, name: str, *,
                 rngs: nnx.Rngs) -> None:
        self.ratio = ratio
        self.num_neighbors = num_neighbors
        self.name = name
        self.feature_in = nnx.Linear(in_width, out_width, rngs=rngs)
        self.position_in = nnx.Linear(3, out_width, use_bias=False, rngs=rngs)
        self.norm_in = nnx.LayerNorm(out_width, rngs=rngs)
        self.mlp_out = LinearNorm(out_width, out_width, rngs=rngs)

    def __call__(self, x: jax.Array, points: jax.Array, mask: jax.Array,
                 ctx: SpikeContext) -> tuple[jax.Array, jax.Array, jax.Array]:
        num_samples = max(points.shape[1] // self.ratio, 1)
        sample_index, sample_mask = farthest_point_sampling(points, mask, num_samples)
        centres = gather_points(points, sample_index)
        neighbors, valid = knn(centres, points, mask, min(self.num_neighbors, points.shape[1]))
        valid = valid & sample_mask[:, :, None]
        spikes = jax.vmap(gather_points, in_axes=(0, None))(ctx.fire(x, mask, f"{self.name}.input"), neighbors)
        relative = gather_points(points, neighbors) - centres[:, :, None, :]
        hidden = self.norm_in(self.feature_in(spikes) + self.position_in(relative)[None])
        hidden = self.mlp_out(ctx.fire(hidden, valid, f"{self.name}.hidden"))
        pooled = jnp.max(jnp.where(valid[None, ..., None], hidden, -jnp.inf), axis=3)
        pooled = jnp.where(jnp.any(valid, axis=-1)[None, ..., None], pooled, 0.0)
        return pooled, centres, sample_mask
