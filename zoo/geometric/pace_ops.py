"""The MCR² quantities and the token-set operators of PACE attention and its two baselines.

Maths from the spec (Yu et al., CRATE; Wu et al., ToST; Yu, Zhang, Deng, Peng, PACEAttention, ICML 2026),
written in the token-row layout the zoo uses: tokens X [B, N, d] (row i = token i, the spec's Z = Xᵀ) with
token weights w [B, N] (0 = padding, 1 = a real token, or a quadrature weight). Every statistic is a weighted
sum over tokens, so a padding token never reaches a real token's output:
  n = Σ_i w_i,  C = Xᵀ diag(w) X (the spec's ZZᵀ),  α = d / (n ε²),
  R(X) = ½ logdet(I_d + α C),                                                    (coding rate)
  R_c(X | U, π) = Σ_k (n_k / 2n) logdet(I_p + α_k Y_kᵀ Π_k Y_k),  Y_k = X U_k [N, p],
      Π_k = diag(w ⊙ π_k), n_k = Σ_i w_i π_{k,i}, α_k = p / (n_k ε²)             (rate of K head subspaces)
and the operators are their exact gradients with respect to X (memberships π held fixed):
  expand(X)   = ∇_X R   = α W X (I + α C)⁻¹                          [B, N, d]
  compress(X) = ∇_X R_c = α_p Σ_k Π_k Y_k (I + α_k Y_kᵀ Π_k Y_k)⁻¹ U_kᵀ, α_p = p / (n ε²) = (n_k/n) α_k.
The matrices I + α C are symmetric with eigenvalues >= 1, so a Cholesky solve needs no jitter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.geometric.common import masked_softmax


def _token_count(weights: jax.Array) -> jax.Array:
    """weights [B, N] -> n = Σ_i w_i [B] (the real-token count for 0/1 weights).

    A row of padding only (the eval pipeline pads its last batch with such rows) counts as n = 1 so that α
    stays finite; its covariance is zero and every operator then returns zeros there.
    """
    total = jnp.sum(weights, axis=-1)
    return jnp.where(total > 0, total, 1.0)


def _cholesky(matrix: jax.Array) -> jax.Array:
    """Lower Cholesky factor of symmetric positive definite [..., m, m] matrices, in plain XLA ops.

    Written as m rank-1 steps instead of calling LAPACK: on CPU, jaxlib's batched LAPACK kernels split their
    batch over the same thread pool that runs them, and two such kernels running at once on a 2-core
    machine were seen to wait on each other forever (a training run of this model hung in strsm). The
    matrices here are small (m = d or p) with eigenvalues >= 1, so no pivoting is needed.
    """
    size = matrix.shape[-1]
    rows = jnp.arange(size)

    def step(k, carry):
        remainder, factor = carry
        column = jnp.take(remainder, k, axis=-1)
        pivot = jnp.sqrt(jnp.take(column, k, axis=-1))
        column = jnp.where(rows >= k, column / pivot[..., None], 0.0)
        remainder = remainder - column[..., :, None] * column[..., None, :]
        factor = factor + column[..., :, None] * (rows == k).astype(matrix.dtype)
        return remainder, factor

    return jax.lax.fori_loop(0, size, step, (matrix, jnp.zeros_like(matrix)))[1]


def _solve_lower(factor: jax.Array, rhs: jax.Array, *, transpose: bool) -> jax.Array:
    """L⁻¹ rhs (transpose False) or L⁻ᵀ rhs (True) for lower-triangular factor [..., m, m], rhs [..., m, N]."""
    size = factor.shape[-1]
    rows = jnp.arange(size)
    triangle = jnp.swapaxes(factor, -1, -2) if transpose else factor

    def step(i, carry):
        remainder, solution = carry
        k = size - 1 - i if transpose else i
        column = jnp.take(triangle, k, axis=-1)
        value = jnp.take(remainder, k, axis=-2) / jnp.take(column, k, axis=-1)[..., None]
        later = (rows < k) if transpose else (rows > k)
        remainder = remainder - jnp.where(later, column, 0.0)[..., :, None] * value[..., None, :]
        solution = solution + (rows == k).astype(rhs.dtype)[:, None] * value[..., None, :]
        return remainder, solution

    return jax.lax.fori_loop(0, size, step, (rhs, jnp.zeros_like(rhs)))[1]


def _logdet_spd(matrix: jax.Array) -> jax.Array:
    """log det of symmetric positive definite [..., m, m] matrices via Cholesky -> [...]."""
    factor = _cholesky(matrix)
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(factor, axis1=-2, axis2=-1)), axis=-1)


def _solve_spd_right(rows: jax.Array, matrix: jax.Array) -> jax.Array:
    """rows [..., N, m] times matrix⁻¹ for symmetric positive definite matrix [..., m, m] -> [..., N, m]."""
    factor = _cholesky(matrix)
    half = _solve_lower(factor, jnp.swapaxes(rows, -1, -2), transpose=False)
    return jnp.swapaxes(_solve_lower(factor, half, transpose=True), -1, -2)


def _identity_plus(scale: jax.Array, covariance: jax.Array) -> jax.Array:
    """I + scale[..., None, None] · covariance for covariance [..., m, m] -> [..., m, m]."""
    size = covariance.shape[-1]
    return jnp.eye(size, dtype=covariance.dtype) + scale[..., None, None] * covariance


def weighted_covariance(x: jax.Array, weights: jax.Array) -> jax.Array:
    """C = Xᵀ diag(w) X: x [B, N, d], weights [B, N] -> [B, d, d]."""
    return jnp.einsum("bnd,bne->bde", weights[..., None] * x, x)


def gaussian_sketch(key: jax.Array, num_tokens: int, rank: int, dtype: jnp.dtype = jnp.float32) -> jax.Array:
    """S [N, r] with i.i.d. N(0, 1/r) entries, so E[S Sᵀ] = I_N."""
    return jax.random.normal(key, (num_tokens, rank), dtype) / jnp.sqrt(jnp.asarray(rank, dtype))


def sketched_covariance(x: jax.Array, weights: jax.Array, sketch: jax.Array) -> jax.Array:
    """Ĉ = (Sᵀ W^½ X)ᵀ (Sᵀ W^½ X), an unbiased estimate of C = Xᵀ W X when E[S Sᵀ] = I.

    x [B, N, d], weights [B, N], sketch [N, r] -> [B, d, d]; cost O(N r d + r d²), linear in N.
    """
    projected = jnp.einsum("nr,bnd->brd", sketch, jnp.sqrt(weights)[..., None] * x)
    return jnp.einsum("brd,bre->bde", projected, projected)


def coding_rate(x: jax.Array, weights: jax.Array, eps_sq: float) -> jax.Array:
    """R(X) = ½ logdet(I_d + α Xᵀ W X), α = d / (n ε²): x [B, N, d], weights [B, N] -> [B]."""
    alpha = x.shape[-1] / (_token_count(weights) * eps_sq)
    return 0.5 * _logdet_spd(_identity_plus(alpha, weighted_covariance(x, weights)))


def expand(x: jax.Array, weights: jax.Array, eps_sq: float, sketch: jax.Array | None = None) -> jax.Array:
    """∇_X R = α W X (I + α C)⁻¹ [B, N, d] (the expansion), with C exact (sketch None) or Ĉ from sketch [N, r].

    With a sketch the output is the gradient of R with C replaced by its randomized estimate (spec reading
    (a)); the cost is then linear in N for a fixed rank r.
    """
    alpha = x.shape[-1] / (_token_count(weights) * eps_sq)
    covariance = weighted_covariance(x, weights) if sketch is None else sketched_covariance(x, weights, sketch)
    scaled = (alpha[:, None] * weights)[..., None] * x
    return _solve_spd_right(scaled, _identity_plus(alpha, covariance))


def subspace_coding_rate(x: jax.Array, weights: jax.Array, bases: jax.Array, eps_sq: float) -> jax.Array:
    """Σ_k R(X V_k) over the head subspaces bases [d, K, p], α = p / (n ε²): x [B, N, d] -> [B]."""
    y = jnp.einsum("bnd,dkp->bknp", x, bases)
    alpha = bases.shape[-1] / (_token_count(weights) * eps_sq)
    covariance = jnp.einsum("bknp,bknq->bkpq", weights[:, None, :, None] * y, y)
    return 0.5 * jnp.sum(_logdet_spd(_identity_plus(alpha[:, None], covariance)), axis=-1)


def subspace_expand(x: jax.Array, weights: jax.Array, bases: jax.Array, eps_sq: float) -> jax.Array:
    """∇_X Σ_k R(X V_k) [B, N, d] for bases V [d, K, p] (spec reading (b): random orthonormal subspaces)."""
    y = jnp.einsum("bnd,dkp->bknp", x, bases)
    alpha = bases.shape[-1] / (_token_count(weights) * eps_sq)
    covariance = jnp.einsum("bknp,bknq->bkpq", weights[:, None, :, None] * y, y)
    scaled = (alpha[:, None, None] * weights[:, None, :])[..., None] * y
    solved = _solve_spd_right(scaled, _identity_plus(alpha[:, None], covariance))
    return jnp.einsum("bknp,dkp->bnd", solved, bases)


def random_orthonormal_bases(key: jax.Array, dim: int, num_heads: int, dtype: jnp.dtype = jnp.float32) -> jax.Array:
    """V [d, K, d/K]: the columns of a random orthogonal d×d matrix, split into K mutually orthogonal blocks."""
    orthogonal, _ = jnp.linalg.qr(jax.random.normal(key, (dim, dim), dtype))
    return orthogonal.reshape(dim, num_heads, dim // num_heads)


def _head_statistics(
    y: jax.Array, weights: jax.Array, memberships: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(Π_k-weighted token weights [B, K, N], n_k [B, K], Y_kᵀ Π_k Y_k [B, K, p, p]) for y [B, K, N, p]."""
    head_weights = weights[:, None, :] * memberships
    covariance = jnp.einsum("bknp,bknq->bkpq", head_weights[..., None] * y, y)
    # A head that owns no token (or a row of padding only) would otherwise give α_k = p / 0.
    return head_weights, jnp.maximum(jnp.sum(head_weights, axis=-1), 1e-12), covariance


def compressed_rate(
    x: jax.Array, weights: jax.Array, memberships: jax.Array, bases: jax.Array, eps_sq: float
) -> jax.Array:
    """R_c(X | U, π) = Σ_k (n_k / 2n) logdet(I_p + α_k Y_kᵀ Π_k Y_k) [B].

    x [B, N, d], weights [B, N], memberships π [B, K, N] (Σ_k π_{k,i} = 1), bases U [d, K, p]. With K copies
    of U_k = I_d this is the spec's full-space R_c.
    """
    y = jnp.einsum("bnd,dkp->bknp", x, bases)
    _, head_counts, covariance = _head_statistics(y, weights, memberships)
    alpha_k = bases.shape[-1] / (head_counts * eps_sq)
    fraction = head_counts / _token_count(weights)[:, None]
    return jnp.sum(0.5 * fraction * _logdet_spd(_identity_plus(alpha_k, covariance)), axis=-1)


def compress(
    x: jax.Array, weights: jax.Array, memberships: jax.Array, bases: jax.Array, eps_sq: float
) -> jax.Array:
    """∇_X R_c with π fixed: α_p Σ_k Π_k Y_k (I + α_k Y_kᵀ Π_k Y_k)⁻¹ U_kᵀ [B, N, d] (shapes as compressed_rate).

    Cost O(K (p² N + p³)): each head solves a p×p system.
    """
    y = jnp.einsum("bnd,dkp->bknp", x, bases)
    head_weights, head_counts, covariance = _head_statistics(y, weights, memberships)
    alpha_k = bases.shape[-1] / (head_counts * eps_sq)
    alpha_p = bases.shape[-1] / (_token_count(weights) * eps_sq)
    solved = _solve_spd_right(head_weights[..., None] * y, _identity_plus(alpha_k, covariance))
    return alpha_p[:, None, None] * jnp.einsum("bknp,dkp->bnd", solved, bases)


def head_memberships(y: jax.Array, weights: jax.Array, temperature: jax.Array) -> jax.Array:
    """ToST's soft assignment of tokens to heads π [B, K, N], a softmax over HEADS (not tokens).

    y [B, K, N, p] (per-head projections), weights [B, N], temperature [K]. Each head coordinate is
    L2-normalized over the (weighted) tokens, squared and summed over the head dimension: a token's share of
    the head's energy, scaled by the head's temperature.
    """
    weighted = jnp.sqrt(weights)[:, None, :, None] * y
    norms = jnp.sqrt(jnp.sum(weighted**2, axis=2, keepdims=True))
    energy = jnp.sum((weighted / jnp.maximum(norms, 1e-12)) ** 2, axis=-1)
    return jax.nn.softmax(temperature[None, :, None] * energy, axis=1)


def tssa_heads(y: jax.Array, weights: jax.Array, temperature: jax.Array) -> jax.Array:
    """ToST's token statistics self-attention before its output projection: [B, K, N, p].

    out_{k,i} = −(π_{k,i} y_{k,i}) ⊙ 1 / (1 + m_k), m_k = Σ_i π̂_{k,i} y_{k,i}² with π̂ = w π normalized over
    tokens; zero on padding tokens. Linear in N.
    """
    memberships = head_memberships(y, weights, temperature)
    token_share = weights[:, None, :] * memberships
    normalized = token_share / (jnp.sum(token_share, axis=-1, keepdims=True) + 1e-8)
    second_moment = jnp.einsum("bkn,bknp->bkp", normalized, y**2)
    mask = (weights > 0).astype(y.dtype)[:, None, :, None]
    return -mask * (memberships[..., None] * y) / (1.0 + second_moment[:, :, None, :])


def mssa_heads(y: jax.Array, weights: jax.Array) -> jax.Array:
    """CRATE's subspace self-attention with ONE projection for query, key and value: [B, K, N, p].

    out_{k,i} = Σ_j softmax_j(y_{k,i} · y_{k,j} / √p) y_{k,j}, padding tokens never attended to.
    """
    scores = jnp.einsum("bkip,bkjp->bkij", y, y) / jnp.sqrt(jnp.asarray(y.shape[-1], y.dtype))
    attention = masked_softmax(scores, weights[:, None, None, :])
    return jnp.einsum("bkij,bkjp->bkip", attention, y)
