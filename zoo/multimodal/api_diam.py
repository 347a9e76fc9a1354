"""DIAM of API (Adaptive Prototype Imputation, ICML 2026): directional instance-adaptive affine modulation.

Six directions s -> t (t2a, t2v, a2t, a2v, v2t, v2a). For each: a source projector d_s -> d_s/2 -> LayerNorm ->
GELU -> Dropout -> d_t maps the temporal mean of the (detached) source sequence to ĉ; a γ-MLP and a β-MLP
(d_t -> max(d_t, mult·d_t) -> GELU -> Dropout -> d_t) give the FiLM parameters; the personalised prototype is
γ(ĉ) ⊙ P_t[c] + β(ĉ), broadcast over time. Xavier-uniform weights, zero biases. As in the official code
(github KX-yolo/API, `trains/singleTask/model/april.py`, commit ef641b3ceaaa3f9430a74bfc6e62f7e072f2939a).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.multimodal.api_backbone import layer_norm

__all__ = ["DIAM", "DIRECTIONS"]

# (name, source modality, target modality); modalities 0 = text, 1 = audio, 2 = vision.
DIRECTIONS = (("t2a", 0, 1), ("t2v", 0, 2), ("a2t", 1, 0), ("a2v", 1, 2), ("v2t", 2, 0), ("v2a", 2, 1))


class DIAM(nnx.Module):
    """The six directional FiLM modulators for a common width d (the backbone's), parameters stacked on a
    leading direction axis in DIRECTIONS order: source projector fc1 [6, d, max(1, d//2)], LayerNorm, fc2
    [6, max(1, d//2), d]; γ- and β-MLPs fc1 [6, d, max(d, mult·d)], fc2 [6, max(d, mult·d), d]."""

    def __init__(self, dim: int, *, hidden_mult: float = 2.0, dropout: float = 0.3, rngs: nnx.Rngs) -> None:
        xavier = nnx.initializers.xavier_uniform(in_axis=-2, out_axis=-1, batch_axis=(0,))
        half, hidden, n = max(1, dim // 2), max(dim, int(hidden_mult * dim)), len(DIRECTIONS)

        def weight(d_in: int, d_out: int) -> nnx.Param:
            return nnx.Param(xavier(rngs.params(), (n, d_in, d_out), jnp.float32))

        def const(size: int, value: float) -> nnx.Param:
            return nnx.Param(jnp.full((n, size), value, jnp.float32))

        self.src_w1, self.src_b1, self.src_w2, self.src_b2 = weight(dim, half), const(half, 0.0), weight(
            half, dim), const(dim, 0.0)
        self.src_ln_scale, self.src_ln_bias = const(half, 1.0), const(half, 0.0)
        self.gamma_w1, self.gamma_b1, self.gamma_w2, self.gamma_b2 = weight(dim, hidden), const(
            hidden, 0.0), weight(hidden, dim), const(dim, 0.0)
        self.beta_w1, self.beta_b1, self.beta_w2, self.beta_b2 = weight(dim, hidden), const(
            hidden, 0.0), weight(hidden, dim), const(dim, 0.0)
        self.dropout = nnx.Dropout(dropout)

    def _drop(self, x: jax.Array, train: bool, rngs: nnx.Rngs | None) -> jax.Array:
        return self.dropout(x, deterministic=not train, rngs=rngs)

    def film(self, source_means: jax.Array, *, train: bool = False,
             rngs: nnx.Rngs | None = None) -> tuple[jax.Array, jax.Array]:
        """(γ, β), each [6, B, d], of every direction from its source's temporal mean source_means [6, B, d]
        (gradient stopped: the source is detached in the reference)."""
        c = jax.lax.stop_gradient(source_means)
        hidden = jnp.einsum("nbi,nio->nbo", c, self.src_w1[...]) + self.src_b1[...][:, None]
        hidden = jax.nn.gelu(layer_norm(hidden, self.src_ln_scale[...][:, None], self.src_ln_bias[...][:, None]),
                             approximate=False)
        c_hat = jnp.einsum("nbi,nio->nbo", self._drop(hidden, train, rngs), self.src_w2[...]) + self.src_b2[...][
            :, None]

        def mlp(w1, b1, w2, b2):
            h = jax.nn.gelu(jnp.einsum("nbi,nio->nbo", c_hat, w1[...]) + b1[...][:, None], approximate=False)
            return jnp.einsum("nbi,nio->nbo", self._drop(h, train, rngs), w2[...]) + b2[...][:, None]

        return (mlp(self.gamma_w1, self.gamma_b1, self.gamma_w2, self.gamma_b2),
                mlp(self.beta_w1, self.beta_b1, self.beta_w2, self.beta_b2))

    def personalise(self, source_means: jax.Array, prototypes: jax.Array, *, train: bool = False,
                    rngs: nnx.Rngs | None = None) -> jax.Array:
        """γ(ĉ) ⊙ P + β(ĉ) for every direction: source_means [6, B, d] (each direction's source), prototypes
        [6, B, T, d] (each direction's target-modality prototype of each sample's class) -> [6, B, T, d]."""
        gamma, beta = self.film(source_means, train=train, rngs=rngs)
        return gamma[:, :, None, :] * prototypes + beta[:, :, None, :]
