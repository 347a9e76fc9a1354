"""PACE attention, CRATE's MSSA and ToST's TSSA as non-causal token-set layers [B, N, d] with token weights.

Every layer maps already-normalized tokens x [B, N, d] and weights [B, N] (0 = padding) to an update
[B, N, d] that the block adds to the residual stream. All three share the head projection U (one
Linear d -> K·p, no bias, truncated normal 0.02: q = k = v = Uᵀx, the MCR² reading) and the output
projection W_o, so at the same width they differ only in the operator between the two.

PACEAttention is a RECONSTRUCTION (no paper text or code was available):
  PACE(X) = W_o (λ_E · Expand(X) − λ_C · Compress(X)),
with the paper's "two learnable weights" read as λ_E, λ_C >= 0 (softplus of a free scalar, both 0.1 at
initialization). Expand is ∇R (pace_ops.expand) with the covariance sketched by a Gaussian S [N, r] (spec
reading (a), default "sketch"), exact ("exact"), or evaluated inside random orthonormal subspaces (reading (b),
"subspace"); Compress is ∇R_c restricted to the K learned head subspaces with ToST's memberships ("subspace"),
or ToST's TSSA operator itself ("tssa": then λ_E = 0 reproduces TSSA).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.geometric import pace_ops

ATTENTIONS = ("pace", "mssa", "tssa")
EXPAND_MODES = ("sketch", "exact", "subspace")
COMPRESS_MODES = ("subspace", "tssa")
PROJECTION_INIT = nnx.initializers.truncated_normal(0.02)
LAMBDA_INIT = 0.1


@dataclasses.dataclass(frozen=True)
class PaceLayerConfig:
    """Shapes and choices of one attention layer (validated by the model's options)."""

    dim: int
    num_heads: int
    eps_sq: float = 0.5
    expand: str = "sketch"
    compress: str = "subspace"
    sketch_rank: int = 32

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads


def _inverse_softplus(value: float) -> float:
    """The free parameter whose softplus is `value` (> 0)."""
    # Python maths: the model is also built under nnx.eval_shape, where a jnp value would be a tracer.
    return math.log(math.expm1(value))


class _HeadAttention(nnx.Module):
    """The shared parts: head projection U [d, K, p] and output projection W_o (d -> d)."""

    def __init__(self, cfg: PaceLayerConfig, *, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        self.heads = nnx.Linear(cfg.dim, cfg.dim, use_bias=False, kernel_init=PROJECTION_INIT, rngs=rngs)
        self.out = nnx.Linear(cfg.dim, cfg.dim, use_bias=False, rngs=rngs)

    def bases(self) -> jax.Array:
        """U [d, K, p] (column block k = head k's subspace)."""
        return self.heads.kernel[...].reshape(self.cfg.dim, self.cfg.num_heads, self.cfg.head_dim)

    def project(self, x: jax.Array) -> jax.Array:
        """x [B, N, d] -> per-head coordinates Uᵀx [B, K, N, p]."""
        return jnp.einsum("bnd,dkp->bknp", x, self.bases())

    def merge_heads(self, heads: jax.Array) -> jax.Array:
        """[B, K, N, p] -> W_o(concat over heads) [B, N, d]."""
        batch, num_heads, tokens, head_dim = heads.shape
        return self.out(jnp.transpose(heads, (0, 2, 1, 3)).reshape(batch, tokens, num_heads * head_dim))


class MSSA(_HeadAttention):
    """CRATE's multi-head subspace self-attention: W_o concat_k (Uᵀx) softmax((Uᵀx)ᵀ(Uᵀx)/√p)."""

    def __call__(self, x: jax.Array, weights: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """x [B, N, d], weights [B, N] -> [B, N, d] (key unused: deterministic)."""
        del key
        return self.merge_heads(pace_ops.mssa_heads(self.project(x), weights))


class TSSA(_HeadAttention):
    """ToST's token statistics self-attention (linear in N), with a learnable per-head temperature (init 1)."""

    def __init__(self, cfg: PaceLayerConfig, *, rngs: nnx.Rngs) -> None:
        super().__init__(cfg, rngs=rngs)
        self.temperature = nnx.Param(jnp.ones((cfg.num_heads,), jnp.float32))

    def __call__(self, x: jax.Array, weights: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """x [B, N, d], weights [B, N] -> [B, N, d] (key unused: deterministic)."""
        del key
        return self.merge_heads(pace_ops.tssa_heads(self.project(x), weights, self.temperature[...]))


class PACEAttention(_HeadAttention):
    """W_o (λ_E Expand − λ_C Compress) (module docstring); λ_E, λ_C = softplus(free scalars), init 0.1 each."""

    def __init__(self, cfg: PaceLayerConfig, *, rngs: nnx.Rngs) -> None:
        super().__init__(cfg, rngs=rngs)
        self.temperature = nnx.Param(jnp.ones((cfg.num_heads,), jnp.float32))
        self.expand_weight = nnx.Param(jnp.asarray(_inverse_softplus(LAMBDA_INIT), jnp.float32))
        self.compress_weight = nnx.Param(jnp.asarray(_inverse_softplus(LAMBDA_INIT), jnp.float32))

    def update_weights(self) -> tuple[jax.Array, jax.Array]:
        """(λ_E, λ_C), both >= 0."""
        return jax.nn.softplus(self.expand_weight[...]), jax.nn.softplus(self.compress_weight[...])

    def expansion(self, x: jax.Array, weights: jax.Array, key: jax.Array | None) -> jax.Array:
        """Expand(x) [B, N, d]. Sketch/subspace modes draw from key; key None: the exact covariance."""
        cfg = self.cfg
        if cfg.expand == "exact" or key is None:
            return pace_ops.expand(x, weights, cfg.eps_sq)
        if cfg.expand == "sketch":
            sketch = pace_ops.gaussian_sketch(key, x.shape[1], cfg.sketch_rank, x.dtype)
            return pace_ops.expand(x, weights, cfg.eps_sq, sketch)
        bases = pace_ops.random_orthonormal_bases(key, cfg.dim, cfg.num_heads, x.dtype)
        return pace_ops.subspace_expand(x, weights, bases, cfg.eps_sq)

    def compression(self, x: jax.Array, weights: jax.Array) -> jax.Array:
        """Compress(x) [B, N, d]: ∇R_c in the head subspaces (memberships held fixed), or TSSA's −output."""
        y = self.project(x)
        temperature = self.temperature[...]
        if self.cfg.compress == "tssa":
            heads = -pace_ops.tssa_heads(y, weights, temperature)
            return jnp.transpose(heads, (0, 2, 1, 3)).reshape(x.shape)
        memberships = jax.lax.stop_gradient(pace_ops.head_memberships(y, weights, temperature))
        return pace_ops.compress(x, weights, memberships, self.bases(), self.cfg.eps_sq)

    def __call__(self, x: jax.Array, weights: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """x [B, N, d], weights [B, N], key for the randomized expansion -> [B, N, d]."""
        expand_weight, compress_weight = self.update_weights()
        update = expand_weight * self.expansion(x, weights, key) - compress_weight * self.compression(x, weights)
        return self.out(update)


class ISTA(nnx.Module):
    """CRATE's sparse-coding block X <- ReLU(X + η (X − X Dᵀ) D − η λ), η = λ = 0.1, D [d, d] Kaiming uniform.

    (Row form of Z <- ReLU(Z + η Dᵀ(Z − D Z) − η λ).) Its own identity term is the block's skip connection.
    """

    STEP = 0.1
    SPARSITY = 0.1

    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        init = jax.nn.initializers.he_uniform()
        self.dictionary = nnx.Param(init(rngs.params(), (dim, dim), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, N, d] -> [B, N, d]."""
        dictionary = self.dictionary[...]
        residual = x - x @ dictionary.T
        return jax.nn.relu(x + self.STEP * residual @ dictionary - self.STEP * self.SPARSITY)


def build_attention(name: str, cfg: PaceLayerConfig, *, rngs: nnx.Rngs) -> nnx.Module:
    """The layer named by `name` ("pace", "mssa", "tssa")."""
    layers = {"pace": PACEAttention, "mssa": MSSA, "tssa": TSSA}
    if name not in layers:
        raise ValueError(f"attention must be one of {list(ATTENTIONS)}, got {name!r}")
    return layers[name](cfg, rngs=rngs)
