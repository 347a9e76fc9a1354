"""The "fold-and-label" toy task of GeoCoupling (arXiv 2606.01628): structure and sequence of 12
residues, where the sequence is a deterministic function of the structure.

Four fold templates of N = 12 residues in 3-D (units: one neighbour step ≈ 1): helix, hairpin, zigzag, ring. An
example is a template in a Haar-random orientation plus Gaussian noise (σ = 0.1), centred. Its token s_i is the
number of other residues within `radius` of residue i, clipped to 0..K − 1 (K = 4): structure → sequence is easy,
sequence → structure is ambiguous (helix, zigzag and ring share most labels).

Metrics on generated samples (NumPy, evaluation only):
    consistency   fraction of residues whose generated token equals the label of the generated structure
    validity      fraction of samples whose Kabsch RMSD to the nearest template is < `VALID_RMSD`
    diversity     entropy of the nearest-template distribution of the valid samples / log(4) (1: all four folds
                  equally covered, 0: one fold or no valid sample)
"""

from __future__ import annotations

import numpy as np

from icml26zoo.validation import check_int, check_non_negative, check_positive

__all__ = ["NUM_RESIDUES", "NUM_TOKENS", "RADIUS", "TEMPLATE_NAMES", "VALID_RMSD", "fold_and_label", "labels",
           "metrics", "nearest_template", "templates"]

NUM_RESIDUES = 12
NUM_TOKENS = 4
RADIUS = 1.2
NOISE = 0.1
VALID_RMSD = 0.3
TEMPLATE_NAMES = ("helix", "hairpin", "zigzag", "ring")


def _helix() -> np.ndarray:
    # 100° per residue, radius 0.6, rise 0.4: consecutive residues ≈ 1.0 apart, i ± 2 and i ± 3 ≈ 1.4.
    angle = np.deg2rad(100.0) * np.arange(NUM_RESIDUES)
    return np.stack([0.6 * np.cos(angle), 0.6 * np.sin(angle), 0.4 * np.arange(NUM_RESIDUES)], 1)


def _hairpin() -> np.ndarray:
    half = NUM_RESIDUES // 2
    x = np.concatenate([np.arange(half), np.arange(half)[::-1]]).astype(float)
    y = np.concatenate([np.zeros(half), np.ones(half)])
    return np.stack([x, y, np.zeros(NUM_RESIDUES)], 1)


def _zigzag() -> np.ndarray:
    index = np.arange(NUM_RESIDUES)
    return np.stack([0.8 * index, 0.3 * (-1.0) ** index, np.zeros(NUM_RESIDUES)], 1)


def _ring() -> np.ndarray:
    angle = 2 * np.pi * np.arange(NUM_RESIDUES) / NUM_RESIDUES
    radius = 1.0 / (2 * np.sin(np.pi / NUM_RESIDUES))  # neighbours 1.0 apart
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), np.zeros(NUM_RESIDUES)], 1)


def templates() -> np.ndarray:
    """The four centred fold templates [4, N, 3] (order TEMPLATE_NAMES)."""
    folds = np.stack([_helix(), _hairpin(), _zigzag(), _ring()])
    return folds - folds.mean(axis=1, keepdims=True)


def labels(points: np.ndarray, radius: float = RADIUS) -> np.ndarray:
    """Tokens int32 [..., N] of structures [..., N, 3]: other residues within `radius`, clipped to 0..K − 1."""
    points = np.asarray(points, np.float64)
    distance = np.linalg.norm(points[..., :, None, :] - points[..., None, :, :], axis=-1)
    close = (distance < radius) & ~np.eye(points.shape[-2], dtype=bool)
    return np.minimum(close.sum(axis=-1), NUM_TOKENS - 1).astype(np.int32)


def _rotations(rng: np.random.Generator, count: int) -> np.ndarray:
    """Haar-uniform rotations [count, 3, 3] (QR of Gaussian matrices with the sign fix, det +1)."""
    q, r = np.linalg.qr(rng.normal(size=(count, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    return q * np.linalg.det(q)[:, None, None]


def fold_and_label(count: int, rng: np.random.Generator, noise: float = NOISE
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` examples: (structures float32 [count, N, 3] centred, tokens int32 [count, N], fold int32 [count])."""
    check_int("count", count)
    check_non_negative("noise", noise, finite=True)
    fold = rng.integers(0, len(TEMPLATE_NAMES), size=count)
    points = np.einsum("bij,bnj->bni", _rotations(rng, count), templates()[fold])
    points = points + noise * rng.normal(size=points.shape)
    points = points - points.mean(axis=1, keepdims=True)
    return points.astype(np.float32), labels(points), fold.astype(np.int32)


def _kabsch_rmsd(moving: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """RMSD [B] of centred moving [B, N, 3] onto fixed [N, 3] after the optimal rotation (det +1)."""
    moving = moving - moving.mean(axis=1, keepdims=True)
    fixed = fixed - fixed.mean(axis=0)
    u, _, vt = np.linalg.svd(np.einsum("ni,bnj->bij", fixed, moving))
    sign = np.sign(np.linalg.det(u @ vt))
    u[:, :, 2] *= np.where(sign == 0, 1.0, sign)[:, None]
    aligned = np.einsum("bij,bnj->bni", u @ vt, moving)
    return np.sqrt(np.mean(np.sum((aligned - fixed) ** 2, axis=-1), axis=1))


def nearest_template(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index int [B] of the nearest template, its Kabsch RMSD [B]) of structures [B, N, 3]."""
    points = np.asarray(points, np.float64)
    rmsd = np.stack([_kabsch_rmsd(points, fold) for fold in templates()], axis=1)
    return rmsd.argmin(axis=1), rmsd.min(axis=1)


def metrics(points: np.ndarray, tokens: np.ndarray, valid_rmsd: float = VALID_RMSD) -> dict[str, float]:
    """consistency, validity and diversity (module docstring) of generated structures [B, N, 3], tokens [B, N]."""
    points, tokens = np.asarray(points), np.asarray(tokens)
    if points.ndim != 3 or points.shape[-1] != 3 or tokens.shape != points.shape[:2]:
        raise ValueError(f"points must be [B, N, 3] and tokens [B, N], got {list(points.shape)} and "
                         f"{list(tokens.shape)}")
    if not np.isfinite(points).all():
        raise ValueError("points must be finite, got a NaN or infinite coordinate")
    check_positive("valid_rmsd", valid_rmsd, finite=True)
    fold, rmsd = nearest_template(points)
    valid = rmsd < valid_rmsd
    counts = np.bincount(fold[valid], minlength=len(TEMPLATE_NAMES)).astype(float)
    share = counts[counts > 0] / max(counts.sum(), 1.0)
    entropy = float(-(share * np.log(share)).sum()) if valid.any() else 0.0
    return {"consistency": float(np.mean(tokens == labels(points))), "validity": float(np.mean(valid)),
            "diversity": entropy / np.log(len(TEMPLATE_NAMES)), "rmsd": float(np.mean(rmsd))}
