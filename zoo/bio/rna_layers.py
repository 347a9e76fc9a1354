"""The gated MPNN layer of ATL (icml26zoo.bio.rna_design): RDesign's MPNN layer with a per-edge gate.

RDesign's layer (A4Bio/RDesign @fa410a9, model/module.py `MPNNLayer`, read for the maths):
    message_ij = W3 ReLU(W2 ReLU(W1 [h_e_ij, h_i, h_j]))
    m_i = Σ_j message_ij / scale         (scale = 30, RDesign's k)
    h_i <- LN(h_i + drop(m_i)); h_i <- LN(h_i + drop(FFN_4x(h_i)))

RECONSTRUCTION (the ATL paper's text is not available; spec): every layer has its own gate MLP
a_ij = MLP([h_e, h_i, h_j]) + b over the candidate pool, with
    gate "concrete"       g = σ((a + log u - log(1 - u)) / τ) in training (u ~ U(0, 1) clipped to
                          [1e-6, 1 - 1e-6]), σ(a / τ) in evaluation (no noise)
    gate "hard_concrete"  the same stretched to (-0.1, 1.1) and clipped to [0, 1] (exact zeros)
    gate "none"           g = 1 on the first k candidates (the k nearest), 0 elsewhere: RDesign's static kNN
Padded candidates get logit -inf before the sigmoid (g = 0 exactly); i ± 1 get g = 1 (no isolated node).
Aggregation "gate_mean": m_i = Σ_j g_ij message_ij / (Σ_j g_ij + ε); "sum_over_k": Σ_j g_ij message_ij / k.
The gate MLP's last layer is zero-initialised with bias b so that every gate starts at the target density ρ.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

GATE_KINDS = ("concrete", "hard_concrete", "none")
AGGREGATIONS = ("gate_mean", "sum_over_k")
STRETCH = (-0.1, 1.1)  # hard-concrete's stretch interval (Louizos et al. 2018)
U_CLIP = 1e-6
GATE_EPS = 1e-6


def gather_nodes(h: jax.Array, nbr_idx: jax.Array) -> jax.Array:
    """h [B, L, d] at nbr_idx [B, L, K] -> [B, L, K, d]."""
    return jax.vmap(lambda v, i: v[i])(h, nbr_idx)


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
    """Inverted dropout; identity when key is None (evaluation) or rate is 0."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def initial_gate_bias(kind: str, density: float, tau: float) -> float:
    """b such that the noise-free gate σ(b / τ) (stretched for hard-concrete) equals the target density."""
    if kind == "hard_concrete":
        low, high = STRETCH
        density = (density - low) / (high - low)
    return tau * math.log(density / (1.0 - density))


def gate_values(logits: jax.Array, kind: str, tau: float, key: jax.Array | None) -> jax.Array:
    """Gates in [0, 1] of logits [...] (module docstring); logistic noise only when key is given (training)."""
    if key is not None:
        u = jnp.clip(jax.random.uniform(key, logits.shape), U_CLIP, 1.0 - U_CLIP)
        logits = logits + jnp.log(u) - jnp.log1p(-u)
    gates = jax.nn.sigmoid(logits / tau)
    if kind == "hard_concrete":
        low, high = STRETCH
        gates = jnp.clip(gates * (high - low) + low, 0.0, 1.0)
    return gates


class GatedMPNNLayer(nnx.Module):
    """h [B, L, d], edge embeddings e [B, L, K, d] -> (h' [B, L, d], gates [B, L, K])."""

    def __init__(self, d: int, *, gate_kind: str, aggregation: str, k: int, density: float, tau: float,
                 dropout_rate: float, rngs: nnx.Rngs) -> None:
        self.gate_kind, self.aggregation, self.k, self.tau = gate_kind, aggregation, k, tau
        self.dropout_rate = dropout_rate
        self.W1 = nnx.Linear(3 * d, d, rngs=rngs)
        self.W2 = nnx.Linear(d, d, rngs=rngs)
        self.W3 = nnx.Linear(d, d, rngs=rngs)
        self.norm1 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, epsilon=1e-5, rngs=rngs)
        self.ffn_in = nnx.Linear(d, 4 * d, rngs=rngs)
        self.ffn_out = nnx.Linear(4 * d, d, rngs=rngs)
        if gate_kind != "none":
            self.gate_in = nnx.Linear(3 * d, d, rngs=rngs)
            self.gate_out = nnx.Linear(d, 1, kernel_init=nnx.initializers.zeros,
                                       bias_init=nnx.initializers.constant(initial_gate_bias(gate_kind, density, tau)),
                                       rngs=rngs)

    def gates(self, first: jax.Array, nbr_mask: jax.Array, sequential: jax.Array, key: jax.Array | None,
              tau: float | jax.Array | None = None) -> jax.Array:
        """Gates [B, L, K] from the gate MLP's first layer pre-activations `first` [B, L, K, d] (None for "none");
        `tau` overrides the layer's temperature (an annealing schedule's current value)."""
        real = nbr_mask > 0
        if self.gate_kind == "none":
            return (real & (jnp.arange(real.shape[2]) < self.k)).astype(jnp.float32)
        logits = self.gate_out(jax.nn.relu(first))[..., 0]
        # -inf before the sigmoid: a padded candidate's gate is exactly 0 (never masked afterwards).
        logits = jnp.where(real, logits, -jnp.inf)
        tau = self.tau if tau is None else tau
        return jnp.where(real & (sequential > 0), 1.0, gate_values(logits, self.gate_kind, tau, key))

    def __call__(self, h: jax.Array, e: jax.Array, nbr_idx: jax.Array, nbr_mask: jax.Array, sequential: jax.Array,
                 key: jax.Array | None = None, tau: float | jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        keys = (None,) * 3 if key is None else tuple(jax.random.split(key, 3))
        first_gate = None if self.gate_kind == "none" else edge_linear(self.gate_in, h, e, nbr_idx)
        gates = self.gates(first_gate, nbr_mask, sequential, keys[0], tau)
        message = self.W3(jax.nn.relu(self.W2(jax.nn.relu(edge_linear(self.W1, h, e, nbr_idx)))))
        total = jnp.sum(gates[..., None] * message, axis=2)
        if self.aggregation == "gate_mean":
            m = total / (jnp.sum(gates, axis=2, keepdims=True) + GATE_EPS)
        else:
            m = total / self.k
        h = self.norm1(h + dropout(m, self.dropout_rate, keys[1]))
        h = self.norm2(h + dropout(self.ffn_out(jax.nn.relu(self.ffn_in(h))), self.dropout_rate, keys[2]))
        return h, gates


def edge_linear(linear: nnx.Linear, h: jax.Array, e: jax.Array, nbr_idx: jax.Array) -> jax.Array:
    """linear([h_e_ij, h_i, h_j]) [B, L, K, out] without building the [B, L, K, 3d] concatenation: the kernel's
    three row blocks act on e, on h before broadcasting and on h before gathering (the same sum, fewer FLOPs)."""
    d = e.shape[-1]
    kernel = linear.kernel[...]
    own, other = h @ kernel[d:2 * d], h @ kernel[2 * d:]
    return e @ kernel[:d] + own[:, :, None] + gather_nodes(other, nbr_idx) + linear.bias[...]
