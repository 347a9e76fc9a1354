"""RNA backbone featuriser of the ATL-FGD inverse-folding model (icml26zoo.bio.rna_design), RDesign's features.

Follows RDesign (Tan et al., ICLR 2024; A4Bio/RDesign @fa410a9, model/feature.py): 6 backbone atoms per
nucleotide (P, O5', C5', C4', C3', O3'), X [B, L, 6, 3], mask [B, L].

    node [B, L, 101]  6 backbone dihedrals as cos/sin (12; a torsion touching a padded or missing atom is 0),
                      RBF distances of O5', C5', C4', C3', O3' to the own P (5 x 16), unit directions of P, C5',
                      C4' from C3' in the nucleotide's local frame (9)
    edge [B, L, K, 115]  quaternion of the relative rotation of the two frames (4), RBF distances from the 6
                      atoms of i to the P of j (96), unit directions of j's P, O5', C5', C4', O3' from i's C3' in
                      i's frame (15)
    nbr_idx int32 [B, L, K], nbr_mask float32 [B, L, K] (1 where both ends are real), sequential [B, L, K]
                      (1 where j = i ± 1: the candidates whose gate ATL fixes to 1)

The candidate pool is dense and padded (static shapes under jit): the K = k_max nearest nucleotides by P-P
distance, i itself included (distance 0), sorted by distance; i ± 1 are always kept (they are given priority
in the sort, so they come first; on real backbones they are the nearest anyway, ~6 Å), and padding is pushed
to a huge distance, so it is selected only after every real nucleotide.
Local frame at C3' (the spec's): u0 = C3' - C4', u1 = O3' - C3' (unit), b = unit(u0 - u1), n = unit(u0 x u1),
rows (b, n, b x n). Degenerate frames and zero-norm vectors give 0, not NaN (RDesign zeroes NaN quaternions).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_float_array, check_int, check_positive

ATOMS = ("P", "O5'", "C5'", "C4'", "C3'", "O3'")
P, O5, C5, C4, C3, O3 = range(6)
NODE_DIM, EDGE_DIM = 101, 115  # with RDesign's 16 RBFs; node_dim / edge_dim give them for any count


def node_dim(num_rbf: int) -> int:
    """12 dihedral channels + 5 RBF-expanded distances + 9 direction channels (101 for 16 RBFs)."""
    return 12 + 5 * num_rbf + 9


def edge_dim(num_rbf: int) -> int:
    """4 quaternion channels + 6 RBF-expanded distances + 15 direction channels (115 for 16 RBFs)."""
    return 4 + 6 * num_rbf + 15
_EPS = 1e-8
# Padding's P-P distance in the neighbour sort (Å): beyond any real one, so padding is picked last.
_FAR = 1e6


def _unit(v: jax.Array) -> jax.Array:
    """v / |v| along the last axis; 0 for a zero vector (no NaN, also in the gradient)."""
    norm_sq = jnp.sum(v * v, axis=-1, keepdims=True)
    safe = jnp.where(norm_sq > _EPS, norm_sq, 1.0)
    return jnp.where(norm_sq > _EPS, v / jnp.sqrt(safe), 0.0)


def rbf(distance: jax.Array, num_rbf: int, rbf_max: float) -> jax.Array:
    """Gaussian RBF [..., num_rbf] of distances [...]: centres evenly on [0, rbf_max], width rbf_max / num_rbf."""
    centres = jnp.linspace(0.0, rbf_max, num_rbf)
    return jnp.exp(-jnp.square((distance[..., None] - centres) / (rbf_max / num_rbf)))


def _distance(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.sum(jnp.square(a - b), axis=-1) + _EPS)


def dihedral_features(X: jax.Array, mask: jax.Array) -> jax.Array:
    """[B, L, 12]: cos and sin of the 6 torsions per nucleotide along the flattened backbone chain
    (P, O5', ..., O3', P, ...); torsion q spans atoms q..q+3, padded by 1 before and 2 after (chain ends) and set
    to 0 where any of its 4 atoms is padding."""
    B, L = mask.shape
    chain = X.reshape(B, 6 * L, 3)
    real = jnp.repeat(mask > 0, 6, axis=1)
    b0, b1, b2 = (chain[:, 1:-2] - chain[:, :-3], chain[:, 2:-1] - chain[:, 1:-2], chain[:, 3:] - chain[:, 2:-1])
    n1, n2 = jnp.cross(b0, b1), jnp.cross(b1, b2)
    x = jnp.sum(n1 * n2, axis=-1)
    y = jnp.sum(jnp.cross(n1, n2) * _unit(b1), axis=-1)
    degenerate = (jnp.abs(x) + jnp.abs(y)) < _EPS
    angle = jnp.arctan2(jnp.where(degenerate, 0.0, y), jnp.where(degenerate, 1.0, x))
    valid = real[:, :-3] & real[:, 1:-2] & real[:, 2:-1] & real[:, 3:] & ~degenerate
    feats = jnp.stack([jnp.cos(angle), jnp.sin(angle)], -1) * valid[..., None].astype(jnp.float32)
    feats = jnp.pad(feats, ((0, 0), (1, 2), (0, 0)))
    return feats.reshape(B, L, 6, 2).transpose(0, 1, 3, 2).reshape(B, L, 12)


def local_frames(X: jax.Array) -> jax.Array:
    """[B, L, 3, 3]: rows (b, n, b x n) of each nucleotide's frame at C3' (module docstring)."""
    u0, u1 = _unit(X[..., C3, :] - X[..., C4, :]), _unit(X[..., O3, :] - X[..., C3, :])
    b, n = _unit(u0 - u1), _unit(jnp.cross(u0, u1))
    return jnp.stack([b, n, jnp.cross(b, n)], axis=-2)


def quaternions(R: jax.Array) -> jax.Array:
    """Unit quaternions (x, y, z, w) [..., 4] of rotation matrices R [..., 3, 3]; 0 for a degenerate R."""
    xx, yy, zz = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    magnitudes = 0.5 * jnp.sqrt(jnp.abs(1.0 + jnp.stack([xx - yy - zz, -xx + yy - zz, -xx - yy + zz], -1)) + _EPS)
    signs = jnp.sign(jnp.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0],
                                R[..., 1, 0] - R[..., 0, 1]], -1))
    w = jnp.sqrt(jax.nn.relu(1.0 + xx + yy + zz) + _EPS)[..., None] / 2.0
    return _unit(jnp.concatenate([signs * magnitudes, w], -1))


def _gather(values: jax.Array, idx: jax.Array) -> jax.Array:
    """values [B, L, ...] gathered at idx [B, L, K] -> [B, L, K, ...]."""
    return jax.vmap(lambda v, i: v[i])(values, idx)


def neighbours(X: jax.Array, mask: jax.Array, k_max: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(nbr_idx int32 [B, L, K], nbr_mask [B, L, K], sequential [B, L, K]) of the candidate pool (module
    docstring), K = min(k_max, L)."""
    real = mask > 0
    P_atoms = X[:, :, P]
    distance = _distance(P_atoms[:, :, None], P_atoms[:, None])
    pair_real = real[:, :, None] & real[:, None, :]
    index = jnp.arange(mask.shape[1])
    adjacent = (jnp.abs(index[:, None] - index[None]) == 1)[None] & pair_real
    # Sort key: i ± 1 first (-1), then the real nucleotides by distance, then padding.
    key = jnp.where(adjacent, -1.0, jnp.where(pair_real, distance, _FAR + index[None, None].astype(jnp.float32)))
    _, nbr_idx = jax.lax.top_k(-key, min(k_max, mask.shape[1]))
    nbr_mask = (jnp.take_along_axis(pair_real, nbr_idx, axis=2)).astype(jnp.float32)
    sequential = jnp.take_along_axis(adjacent, nbr_idx, axis=2).astype(jnp.float32)
    return nbr_idx.astype(jnp.int32), nbr_mask, sequential


@dataclasses.dataclass(frozen=True)
class RNABackboneFeaturizer:
    """Parameter-free: X [B, L, 6, 3] (Å), mask [B, L] -> dict(node, edge, nbr_idx, nbr_mask, sequential)."""

    k_max: int = 48
    num_rbf: int = 16
    rbf_max: float = 20.0

    def __post_init__(self) -> None:
        check_int("k_max", self.k_max)
        check_int("num_rbf", self.num_rbf)
        check_positive("rbf_max", self.rbf_max, finite=True)

    def __call__(self, X: jax.Array, mask: jax.Array) -> dict[str, jax.Array]:
        check_backbone(X, mask)
        X = X.astype(jnp.float32)
        # Padding rows may hold anything (zeros): replace them by the first atom so no frame there is degenerate.
        X = jnp.where((mask > 0)[..., None, None], X, X[:, :1, :1])
        frames = local_frames(X)
        own = _distance(X[:, :, 1:], X[:, :, :1])  # O5'..O3' to own P [B, L, 5]
        local_dirs = jnp.einsum("blij,blaj->blai", frames, _unit(X[:, :, (P, C5, C4)] - X[:, :, C3:C3 + 1]))
        node = jnp.concatenate([dihedral_features(X, mask), rbf(own, self.num_rbf, self.rbf_max).reshape(
            *mask.shape, -1), local_dirs.reshape(*mask.shape, 9)], -1)
        nbr_idx, nbr_mask, sequential = neighbours(X, mask, self.k_max)
        nbr_X, nbr_frames = _gather(X, nbr_idx), _gather(frames, nbr_idx)  # [B, L, K, 6, 3], [B, L, K, 3, 3]
        relative = jnp.einsum("blij,blkmj->blkim", frames, nbr_frames)  # O_i O_j^T
        to_P = _distance(X[:, :, None, :, :], nbr_X[:, :, :, P:P + 1, :])  # [B, L, K, 6]
        directions = _unit(nbr_X[:, :, :, (P, O5, C5, C4, O3)] - X[:, :, None, C3:C3 + 1])
        local = jnp.einsum("blij,blkaj->blkai", frames, directions)
        edge = jnp.concatenate([quaternions(relative), rbf(to_P, self.num_rbf, self.rbf_max).reshape(
            *nbr_idx.shape, -1), local.reshape(*nbr_idx.shape, 15)], -1)
        return {"node": node * mask[..., None], "edge": edge * nbr_mask[..., None], "nbr_idx": nbr_idx,
                "nbr_mask": nbr_mask, "sequential": sequential}


def check_backbone(X: jax.Array, mask: jax.Array) -> None:
    """ValueError naming X or mask unless X is float [B, L, 6, 3] and mask [B, L]; when X is concrete (not traced
    under jit), also unless every real nucleotide's coordinates are finite."""
    check_float_array("X", X, (None, None, 6, 3), "[B, L, 6, 3]")
    check_float_array("mask", mask, X.shape[:2], "[B, L]")
    if isinstance(X, jax.core.Tracer) or isinstance(mask, jax.core.Tracer):
        return
    finite = np.isfinite(np.asarray(X)).all(axis=(2, 3)) | (np.asarray(mask) <= 0)
    if not finite.all():
        row, nucleotide = np.argwhere(~finite)[0].tolist()
        raise ValueError(f"X must be finite on real nucleotides; row {row}, nucleotide {nucleotide} has a NaN or "
                         "infinite coordinate")
