"""The building blocks of APT (Adaptive Physics Transformer; Ju et al., arXiv 2602.11208): random Fourier
features, the radius/k-nearest neighbour lists, the local graph-neural-operator (GNO) layer in its kernel and
attentional forms, and the global Perceiver branch.

RECONSTRUCTION: the paper's code is not public. The equations are those of the zoo's spec (GNO/GINO kernel
integrals, GAOT's attentional GNO, Perceiver latent cross-attention), written so that every sum over nodes is a
quadrature with the nodes' weights w: duplicating a node and halving the weight of both copies, or adding
padding nodes of weight 0, leaves every output unchanged.

Shapes: B examples, N nodes, d coordinates, D = d_model channels, H heads of width D / H, k neighbours per
node, M latent tokens.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric.common import MASKED_LOGIT, masked_softmax


def fourier_basis(seed: int, coord_dim: int, num_features: int, scale: float) -> jax.Array:
    """The fixed random frequency matrix [d, num_features // 2] ~ N(0, scale²) of the Fourier features.

    Drawn from `seed`, not from the model's rngs: the basis is part of the architecture (it is not trained),
    and under jit it is a compile-time constant.
    """
    return scale * jax.random.normal(jax.random.key(seed), (coord_dim, num_features // 2), jnp.float32)


def fourier_features(points: jax.Array, basis: jax.Array) -> jax.Array:
    """points [B, N, d], basis [d, F/2] -> [sin(2π x·B), cos(2π x·B)] [B, N, F]."""
    angles = 2.0 * math.pi * jnp.einsum("bnd,df->bnf", points, basis)
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def log_weights(weights: jax.Array) -> jax.Array:
    """weights [...] -> log w where w > 0, MASKED_LOGIT where w = 0 (padding); no log(0) in any gradient."""
    real = weights > 0
    return jnp.where(real, jnp.log(jnp.where(real, weights, 1.0)), MASKED_LOGIT)


def neighbour_lists(
    points: jax.Array, weights: jax.Array, radius: float, max_neighbours: int, adjacency: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """The k nearest real nodes within `radius` (or joined by a mesh edge) of every node.

    points [B, N, d], weights [B, N], adjacency [B, N, N] bool or None -> (index [B, N, k] int32, valid
    [B, N, k] bool) with k = min(max_neighbours, N). A node counts itself (distance 0). Dense [B, N, N]
    distances: the zoo's meshes have a few thousand nodes at most. Invalid slots point at arbitrary nodes and
    must be masked by `valid`.
    """
    offsets = points[:, :, None, :] - points[:, None, :, :]
    distance2 = jnp.sum(offsets * offsets, axis=-1)
    candidate = distance2 <= radius * radius
    if adjacency is not None:
        candidate = candidate | adjacency
    candidate = candidate & (weights > 0)[:, None, :]
    score = jnp.where(candidate, -distance2, -jnp.inf)
    k = min(max_neighbours, points.shape[1])
    top, index = jax.lax.top_k(score, k)
    return index.astype(jnp.int32), top > -jnp.inf


def gather_neighbours(values: jax.Array, index: jax.Array) -> jax.Array:
    """values [B, N, C], index [B, N, k] -> values of each node's neighbours [B, N, k, C]."""
    return jax.vmap(lambda v, i: v[i])(values, index)


class Mlp(nnx.Module):
    """Linear -> GELU -> Linear, [..., in] -> [..., out]."""

    def __init__(self, in_features: int, hidden: int, out_features: int, *, rngs: nnx.Rngs) -> None:
        self.first = nnx.Linear(in_features, hidden, rngs=rngs)
        self.second = nnx.Linear(hidden, out_features, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.second(jax.nn.gelu(self.first(x)))


class LocalGNOLayer(nnx.Module):
    """One local kernel-integral layer over the neighbour lists (residual update of the node states).

    operator "kernel" (GNO): g_i = Σ_j w̄_ij κ(x_i, x_j, x_i − x_j) ⊙ W_v h_j with w̄_ij = w_j / Σ_j' w_j'
    over i's valid neighbours, κ an MLP of the coordinates and their offset.
    operator "attention" (GAOT-like): per head, g_i = Σ_j softmax_j(q_i·k_j/√d_h + log w_j + b(x_i − x_j)) v_j.
    Both: h_i ← h_i + MLP(LN([h_i, g_i])).
    """

    def __init__(self, d_model: int, num_heads: int, coord_dim: int, operator: str, *, rngs: nnx.Rngs) -> None:
        self.operator = operator
        self.num_heads = num_heads
        self.norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        if operator == "kernel":
            self.kernel = Mlp(3 * coord_dim, d_model, d_model, rngs=rngs)
        else:
            self.query = nnx.Linear(d_model, d_model, rngs=rngs)
            self.key = nnx.Linear(d_model, d_model, rngs=rngs)
            self.offset_bias = nnx.Linear(coord_dim, num_heads, rngs=rngs)
            self.out = nnx.Linear(d_model, d_model, rngs=rngs)
        self.update_norm = nnx.LayerNorm(2 * d_model, rngs=rngs)
        self.update = Mlp(2 * d_model, d_model, d_model, rngs=rngs)

    def __call__(self, h: jax.Array, points: jax.Array, weights: jax.Array, index: jax.Array,
                 valid: jax.Array) -> jax.Array:
        """h [B, N, D], points [B, N, d], weights [B, N], index/valid [B, N, k] -> h [B, N, D]."""
        normed = self.norm(h)
        neighbour_points = gather_neighbours(points, index)
        neighbour_weights = jnp.where(valid, gather_neighbours(weights[..., None], index)[..., 0], 0.0)
        if self.operator == "kernel":
            aggregated = self._kernel_sum(normed, points, neighbour_points, neighbour_weights, index)
        else:
            aggregated = self._attention_sum(normed, points, neighbour_points, neighbour_weights, index)
        return h + self.update(self.update_norm(jnp.concatenate([h, aggregated], axis=-1)))

    def _kernel_sum(self, normed, points, neighbour_points, neighbour_weights, index) -> jax.Array:
        centre = jnp.broadcast_to(points[:, :, None, :], neighbour_points.shape)
        kappa = self.kernel(jnp.concatenate([centre, neighbour_points, centre - neighbour_points], axis=-1))
        values = gather_neighbours(self.value(normed), index)
        # A real node is always its own neighbour; only a padding row can have total 0 (divided by 1, output 0).
        total = jnp.sum(neighbour_weights, axis=-1, keepdims=True)
        quadrature = neighbour_weights / jnp.where(total > 0, total, 1.0)
        return jnp.einsum("bnk,bnkc->bnc", quadrature, kappa * values)

    def _attention_sum(self, normed, points, neighbour_points, neighbour_weights, index) -> jax.Array:
        batch, nodes, _ = normed.shape
        head_dim = normed.shape[-1] // self.num_heads
        split = lambda x: x.reshape(*x.shape[:-1], self.num_heads, head_dim)
        queries = split(self.query(normed))
        keys = split(gather_neighbours(self.key(normed), index))
        values = split(gather_neighbours(self.value(normed), index))
        logits = jnp.einsum("bnhc,bnkhc->bnhk", queries, keys) / math.sqrt(head_dim)
        offset_bias = self.offset_bias(points[:, :, None, :] - neighbour_points)
        logits = logits + jnp.swapaxes(offset_bias, 2, 3) + log_weights(neighbour_weights)[:, :, None, :]
        probs = masked_softmax(logits, neighbour_weights[:, :, None, :])
        mixed = jnp.einsum("bnhk,bnkhc->bnhc", probs, values).reshape(batch, nodes, -1)
        return self.out(mixed)


class CrossAttention(nnx.Module):
    """Multi-head attention of queries [B, Q, D] over keys/values [B, S, D] with a per-key logit bias.

    bias [B, S] is added to every query's logits (the Perceiver's + log w_s); keys whose key_weights [B, S]
    are 0 are removed.
    """

    def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs) -> None:
        self.num_heads = num_heads
        self.query = nnx.Linear(d_model, d_model, rngs=rngs)
        self.key = nnx.Linear(d_model, d_model, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        self.out = nnx.Linear(d_model, d_model, rngs=rngs)

    def __call__(self, queries: jax.Array, keys: jax.Array, bias: jax.Array | None = None,
                 key_weights: jax.Array | None = None) -> jax.Array:
        head_dim = queries.shape[-1] // self.num_heads
        split = lambda x: x.reshape(*x.shape[:-1], self.num_heads, head_dim)
        q, k, v = split(self.query(queries)), split(self.key(keys)), split(self.value(keys))
        logits = jnp.einsum("bqhc,bshc->bhqs", q, k) / math.sqrt(head_dim)
        if bias is not None:
            logits = logits + bias[:, None, None, :]
        if key_weights is None:
            probs = jax.nn.softmax(logits, axis=-1)
        else:
            probs = masked_softmax(logits, key_weights[:, None, None, :])
        mixed = jnp.einsum("bhqs,bshc->bqhc", probs, v)
        return self.out(mixed.reshape(*queries.shape[:-1], -1))


class LatentBlock(nnx.Module):
    """Pre-LN self-attention + MLP on the latent tokens [B, M, D]."""

    def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs) -> None:
        self.attention_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.attention = CrossAttention(d_model, num_heads, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.mlp = Mlp(d_model, 2 * d_model, d_model, rngs=rngs)

    def __call__(self, latents: jax.Array) -> jax.Array:
        normed = self.attention_norm(latents)
        latents = latents + self.attention(normed, normed)
        return latents + self.mlp(self.mlp_norm(latents))


class PerceiverBranch(nnx.Module):
    """The global branch: M learned latents read the nodes (logits + log w_i), think, and are read back.

    Λ ← Λ + CrossAttn(Λ, {h_i + P γ(x_i)}; + log w_i); Λ ← Λ + MLP(Λ); latent_layers × LatentBlock;
    h_i^glob = h_i + CrossAttn(h_i, Λ). Cost O(N·M + M²) per example.
    """

    def __init__(self, d_model: int, num_heads: int, num_latents: int, latent_layers: int, fourier_dim: int,
                 *, rngs: nnx.Rngs) -> None:
        init = jax.nn.initializers.truncated_normal(0.02)
        self.latents = nnx.Param(init(rngs.params(), (num_latents, d_model), jnp.float32))
        self.position = nnx.Linear(fourier_dim, d_model, rngs=rngs)
        self.node_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.latent_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.encode = CrossAttention(d_model, num_heads, rngs=rngs)
        self.encode_mlp_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.encode_mlp = Mlp(d_model, 2 * d_model, d_model, rngs=rngs)
        self.blocks = nnx.List([LatentBlock(d_model, num_heads, rngs=rngs) for _ in range(latent_layers)])
        self.decode_query_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.decode_latent_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.decode = CrossAttention(d_model, num_heads, rngs=rngs)

    def encode_latents(self, h: jax.Array, fourier: jax.Array, weights: jax.Array) -> jax.Array:
        """h [B, N, D], fourier [B, N, F], weights [B, N] -> latents [B, M, D] (invariant to node order)."""
        nodes = self.node_norm(h + self.position(fourier))
        latents = jnp.broadcast_to(self.latents[...], (h.shape[0], *self.latents.shape))
        latents = latents + self.encode(self.latent_norm(latents), nodes, bias=log_weights(weights),
                                        key_weights=weights)
        latents = latents + self.encode_mlp(self.encode_mlp_norm(latents))
        for block in self.blocks:
            latents = block(latents)
        return latents

    def __call__(self, h: jax.Array, fourier: jax.Array, weights: jax.Array) -> jax.Array:
        """h [B, N, D], fourier [B, N, F], weights [B, N] -> h^glob [B, N, D]."""
        latents = self.encode_latents(h, fourier, weights)
        return h + self.decode(self.decode_query_norm(h), self.decode_latent_norm(latents))
