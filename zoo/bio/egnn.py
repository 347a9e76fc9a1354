"""EGNN and plain GNN message-passing layers on an edge list (`jax.ops.segment_sum`), as VN-EGNN / ConGLUDe use them.

The edge layout is jraph's (icml26zoo.graphs.GraphsTuple): a message flows senders[e] -> receivers[e], indices
into flat node arrays (several graphs batched by offsetting their indices). A layer may be bipartite: senders
index one node set (h_src [Ns, F], x_src [Ns, 3]) and receivers another (h_dst [Nd, F], x_dst [Nd, 3]); an
edge_mask [E] (1 real, 0 padding) lets fixed-shape batches carry padding edges.

EGNN layer (operation order of ml-jku/conglude conglude/modules/utils/gnn_layers.py `EGNNLayer`, commit
71c7113823e1ef1f0f81b1b8235b2e25dc71c1cc; written here from that description, not copied):
    m_e   = φ_m([LN(h_dst[r_e]), LN(h_src[s_e]), ‖x_dst[r_e] − x_src[s_e]‖])     φ_m: Linear(2F+1→H), SiLU, Linear(H→H)
    Δx_i  = mean_{e: r_e = i} s · (x_i − x_{s_e}) / max(‖x_i − x_{s_e}‖, 1e-8) · φ_x(m_e)
                                                                             φ_x: Linear(H→H), SiLU, Linear(H→1)
    h_i  ← h_i + φ_h([h_i, mean_{e: r_e = i} m_e])                            φ_h: Linear(F+H→H), SiLU, Linear(H→F)
    x_i  ← x_i + Δx_i  (only when update_coords; else x_i is unchanged)
LN is PyTorch Geometric's LayerNorm in its default "graph" mode called without a batch vector, as the official
layer calls it: one mean and one (biased) standard deviation over every entry of the gathered [E, F] endpoint
features of the call (real edges only here), (v − mean) / (std + 1e-5) · γ + β, applied separately to the
receiver and the sender endpoints with the same γ, β. The GNN layer is the same without coordinates or distance.
Weights are Xavier-normal (gain 1), biases zero, the coordinate scale s starts at 0.01 (the official init).
Dense form (`dense`, the same parameters): for a batch of padded node sets, the edges given as a mask
adjacency [B, Nd, Ns] instead of a list. It computes exactly the edge-list layer's function without gathers and
scatters (slow on CPU): the first message Linear on [LN(h_i), LN(h_j), d_ij] is split into its three row blocks,
applied per node and broadcast over the pairs; the LN statistics are the edge list's (each node weighted by its
number of edges). The zoo's ConGLUDe model uses it; tests check it against the edge-list form.
Deviation: the official MLPs hold dropout (0.1) between the first Linear and the activation; these layers have
none (the zoo's shared trainer has no dropout key; see docs/papers/conglude.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

__all__ = ["EGNNLayer", "dense_layer_norm", "GNNLayer", "TwoLayerMLP", "graph_layer_norm", "safe_norm", "segment_mean"]

_NORM_EPS = 1e-5  # PyG LayerNorm's eps, added to the standard deviation
_DIRECTION_EPS = 1e-8  # CoordsNorm's clamp of ‖x_i − x_j‖
_TINY = 1e-20


def safe_norm(vectors: jax.Array) -> jax.Array:
    """‖v‖ over the last axis, [..., 3] -> [...]; its gradient is finite (0) at v = 0 (padding edges)."""
    return jnp.sqrt(jnp.maximum(jnp.sum(jnp.square(vectors), axis=-1), _TINY))


def segment_mean(data: jax.Array, segment_ids: jax.Array, num_segments: int, mask: jax.Array) -> jax.Array:
    """Mean of the rows data [E, C] with mask [E] > 0 per receiving segment -> [num_segments, C] (0 where a
    segment receives nothing)."""
    weights = mask.astype(data.dtype)
    total = jax.ops.segment_sum(data * weights[:, None], segment_ids, num_segments=num_segments)
    count = jax.ops.segment_sum(weights, segment_ids, num_segments=num_segments)
    return total / jnp.maximum(count, 1.0)[:, None]


def graph_layer_norm(values: jax.Array, mask: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    """PyG LayerNorm, "graph" mode without a batch vector, over the rows values [E, F] with mask [E] > 0: one mean
    and one biased std over all those entries; (v − mean) / (std + 1e-5) · scale [F] + bias [F] -> [E, F]."""
    weights = mask.astype(values.dtype)[:, None]
    count = jnp.maximum(jnp.sum(weights) * values.shape[-1], 1.0)
    mean = jnp.sum(values * weights) / count
    variance = jnp.sum(jnp.square(values - mean) * weights) / count
    return (values - mean) / (jnp.sqrt(variance) + _NORM_EPS) * scale + bias


def dense_layer_norm(h_dst: jax.Array, h_src: jax.Array, adjacency: jax.Array, scale: jax.Array, bias: jax.Array
                     ) -> tuple[jax.Array, jax.Array]:
    """graph_layer_norm of the receiver and of the sender endpoints of the edges adjacency [B, Nd, Ns] > 0,
    computed per node: (LN'd h_dst [B, Nd, F], LN'd h_src [B, Ns, F])."""
    edges = (adjacency > 0).astype(h_dst.dtype)
    return (_weighted_norm(h_dst, jnp.sum(edges, axis=2), scale, bias),
            _weighted_norm(h_src, jnp.sum(edges, axis=1), scale, bias))


def _weighted_norm(values: jax.Array, counts: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    total = jnp.maximum(jnp.sum(counts) * values.shape[-1], 1.0)
    mean = jnp.sum(values * counts[..., None]) / total
    variance = jnp.sum(jnp.square(values - mean) * counts[..., None]) / total
    return (values - mean) / (jnp.sqrt(variance) + _NORM_EPS) * scale + bias


def _masked_mean(values: jax.Array, edges: jax.Array) -> jax.Array:
    """values [B, Nd, Ns, C] averaged over the senders with edges [B, Nd, Ns] > 0 -> [B, Nd, C]."""
    total = jnp.einsum("bij,bijc->bic", edges, values)
    return total / jnp.maximum(jnp.sum(edges, axis=2), 1.0)[..., None]


def _pair_messages(mlp: TwoLayerMLP, h_i: jax.Array, h_j: jax.Array, distance: jax.Array | None) -> jax.Array:
    """mlp([h_i, h_j(, d_ij)]) for every pair: h_i [B, Nd, F], h_j [B, Ns, F], distance [B, Nd, Ns] or None ->
    [B, Nd, Ns, H], the first Linear split into its row blocks (no [B, Nd, Ns, 2F+1] input is built)."""
    kernel, width = mlp.first.kernel[...], h_i.shape[-1]
    pre = (h_i @ kernel[:width])[:, :, None] + (h_j @ kernel[width: 2 * width])[:, None] + mlp.first.bias[...]
    if distance is not None:
        pre = pre + distance[..., None] * kernel[2 * width]
    return mlp.second(jax.nn.silu(pre))


class TwoLayerMLP(nnx.Module):
    """Linear(n_in → hidden), SiLU, Linear(hidden → n_out); Xavier-normal weights, zero biases. [..., n_in] ->
    [..., n_out]."""

    def __init__(self, n_in: int, hidden: int, n_out: int, *, rngs: nnx.Rngs) -> None:
        init = nnx.initializers.xavier_normal()
        self.first = nnx.Linear(n_in, hidden, kernel_init=init, rngs=rngs)
        self.second = nnx.Linear(hidden, n_out, kernel_init=init, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.second(jax.nn.silu(self.first(x)))


class _Norm(nnx.Module):
    def __init__(self, features: int) -> None:
        self.scale = nnx.Param(jnp.ones((features,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((features,), jnp.float32))

    def __call__(self, values: jax.Array, mask: jax.Array) -> jax.Array:
        return graph_layer_norm(values, mask, self.scale[...], self.bias[...])


class GNNLayer(nnx.Module):
    """Plain message passing (the EGNN layer without coordinates): h_dst [Nd, F] <- h_src [Ns, F] over the edges."""

    def __init__(self, features: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.norm = _Norm(features)
        self.message = TwoLayerMLP(2 * features, hidden, hidden, rngs=rngs)
        self.update = TwoLayerMLP(features + hidden, hidden, features, rngs=rngs)

    def __call__(self, h_src: jax.Array, h_dst: jax.Array, senders: jax.Array, receivers: jax.Array,
                 edge_mask: jax.Array) -> jax.Array:
        """Updated receiver features [Nd, F]."""
        inputs = [self.norm(h_dst[receivers], edge_mask), self.norm(h_src[senders], edge_mask)]
        messages = self.message(jnp.concatenate(inputs, axis=-1))
        aggregated = segment_mean(messages, receivers, h_dst.shape[0], edge_mask)
        return h_dst + self.update(jnp.concatenate([h_dst, aggregated], axis=-1))

    def dense(self, h_src: jax.Array, h_dst: jax.Array, adjacency: jax.Array) -> jax.Array:
        """The same layer on padded batches: h_src [B, Ns, F], h_dst [B, Nd, F], adjacency [B, Nd, Ns] (> 0: an
        edge sender j -> receiver i) -> [B, Nd, F]."""
        edges = (adjacency > 0).astype(h_dst.dtype)
        norm_dst, norm_src = dense_layer_norm(h_dst, h_src, edges, self.norm.scale[...], self.norm.bias[...])
        aggregated = _masked_mean(_pair_messages(self.message, norm_dst, norm_src, None), edges)
        return h_dst + self.update(jnp.concatenate([h_dst, aggregated], axis=-1))


class EGNNLayer(nnx.Module):
    """E(3)-equivariant message passing (module docstring): (h_dst [Nd, F], x_dst [Nd, 3]) updated from
    (h_src [Ns, F], x_src [Ns, 3]) over the edges."""

    def __init__(self, features: int, hidden: int, *, update_coords: bool, coord_scale_init: float = 0.01,
                 rngs: nnx.Rngs) -> None:
        self.update_coords = update_coords
        self.norm = _Norm(features)
        self.message = TwoLayerMLP(2 * features + 1, hidden, hidden, rngs=rngs)
        self.update = TwoLayerMLP(features + hidden, hidden, features, rngs=rngs)
        self.position = TwoLayerMLP(hidden, hidden, 1, rngs=rngs)
        self.coord_scale = nnx.Param(jnp.full((1,), coord_scale_init, jnp.float32))

    def __call__(self, h_src: jax.Array, x_src: jax.Array, h_dst: jax.Array, x_dst: jax.Array,
                 senders: jax.Array, receivers: jax.Array, edge_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(features [Nd, F], coordinates [Nd, 3]) of the receivers after one layer."""
        offsets = x_dst[receivers] - x_src[senders]
        distance = safe_norm(offsets)[:, None]
        inputs = [self.norm(h_dst[receivers], edge_mask), self.norm(h_src[senders], edge_mask), distance]
        messages = self.message(jnp.concatenate(inputs, axis=-1))
        num_dst = h_dst.shape[0]
        features = h_dst + self.update(jnp.concatenate([h_dst, segment_mean(messages, receivers, num_dst,
                                                                              edge_mask)], axis=-1))
        if not self.update_coords:
            return features, x_dst
        directions = offsets / jnp.maximum(distance, _DIRECTION_EPS) * self.coord_scale[...]
        shifts = segment_mean(directions * self.position(messages), receivers, num_dst, edge_mask)
        return features, x_dst + shifts

    def dense(self, h_src: jax.Array, x_src: jax.Array, h_dst: jax.Array, x_dst: jax.Array, adjacency: jax.Array
              ) -> tuple[jax.Array, jax.Array]:
        """The same layer on padded batches: h_src [B, Ns, F], x_src [B, Ns, 3], h_dst [B, Nd, F], x_dst [B, Nd, 3],
        adjacency [B, Nd, Ns] (> 0: an edge sender j -> receiver i) -> (features [B, Nd, F], coordinates)."""
        edges = (adjacency > 0).astype(h_dst.dtype)
        offsets = x_dst[:, :, None] - x_src[:, None]  # [B, Nd, Ns, 3]
        distance = safe_norm(offsets)
        norm_dst, norm_src = dense_layer_norm(h_dst, h_src, edges, self.norm.scale[...], self.norm.bias[...])
        messages = _pair_messages(self.message, norm_dst, norm_src, distance)
        features = h_dst + self.update(jnp.concatenate([h_dst, _masked_mean(messages, edges)], axis=-1))
        if not self.update_coords:
            return features, x_dst
        directions = offsets / jnp.maximum(distance, _DIRECTION_EPS)[..., None] * self.coord_scale[...]
        return features, x_dst + _masked_mean(directions * self.position(messages), edges)
