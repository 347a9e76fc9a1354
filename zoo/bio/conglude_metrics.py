"""ConGLUDe's evaluation: merging virtual nodes into pockets, DCC success, virtual-screening AUROC and EF1%,
target-fishing rank and ligand-conditioned pocket selection (NumPy, on a trained model's outputs).

Merging (SIMPLIFIED: the paper clusters VN positions with DBSCAN, eps 4 Å, or mean-shift): VNs are visited in
decreasing confidence; each joins the first cluster whose first (most confident) member lies within `radius` Å,
else starts a new one. A cluster's position is its members' mean, its confidence their maximum, its pocket
embedding their normalised mean. Deterministic and order-independent apart from confidence ties.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Pockets", "auroc", "dcc_success", "enrichment_factor", "merge_virtual_nodes", "pocket_selection",
           "target_rank"]

DCC_THRESHOLD = 4.0  # Å


class Pockets(NamedTuple):
    """One protein's merged pockets: positions [C, 3], confidence [C], embeddings [C, P], most confident first."""

    positions: np.ndarray
    confidence: np.ndarray
    embeddings: np.ndarray


def merge_virtual_nodes(positions: np.ndarray, confidence: np.ndarray, embeddings: np.ndarray,
                        radius: float = DCC_THRESHOLD) -> Pockets:
    """Merges one protein's VNs (positions [K, 3], confidence [K], embeddings [K, P]) as the module docstring."""
    order = np.argsort(-confidence, kind="stable")
    clusters: list[list[int]] = []
    for index in order:
        for members in clusters:
            if np.linalg.norm(positions[index] - positions[members[0]]) < radius:
                members.append(int(index))
                break
        else:
            clusters.append([int(index)])
    mean = np.stack([embeddings[m].mean(axis=0) for m in clusters])
    return Pockets(np.stack([positions[m].mean(axis=0) for m in clusters]),
                   np.asarray([confidence[m].max() for m in clusters]),
                   mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12))


def dcc_success(pockets: Pockets, centres: np.ndarray, threshold: float = DCC_THRESHOLD) -> np.ndarray:
    """bool [T] per true pocket centre (centres [T, 3]): one of the T most confident merged pockets lies within
    `threshold` Å of it (DCC success, top-n with n the number of true pockets)."""
    top = pockets.positions[: len(centres)]
    distance = np.linalg.norm(centres[:, None] - top[None], axis=-1)
    return distance.min(axis=1) < threshold


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of scores [L] for binary labels [L] (ties count one half); needs both classes."""
    labels = np.asarray(labels, bool)
    positive, negative = scores[labels], scores[~labels]
    if not positive.size or not negative.size:
        raise ValueError(f"labels must hold both classes, got {positive.size} positives and {negative.size} negatives")
    greater = (positive[:, None] > negative[None]).sum() + 0.5 * (positive[:, None] == negative[None]).sum()
    return float(greater / (positive.size * negative.size))


def enrichment_factor(scores: np.ndarray, labels: np.ndarray, fraction: float = 0.01) -> float:
    """EF at `fraction`: (actives among the top ⌈fraction·L⌉ scores / that count) / (actives / L)."""
    labels = np.asarray(labels, bool)
    if not labels.any():
        raise ValueError("labels must hold at least one active, got none")
    count = max(1, int(np.ceil(fraction * len(scores))))
    top = np.argsort(-scores, kind="stable")[:count]
    return float(labels[top].mean() / labels.mean())


def target_rank(scores: np.ndarray, true_index: int) -> int:
    """1-based rank of the candidate `true_index` among scores [C] (ties ranked pessimistically)."""
    return int(np.sum(scores >= scores[true_index]))


def pocket_selection(pockets: Pockets, ligand_pocket: np.ndarray, centre: np.ndarray,
                     threshold: float = DCC_THRESHOLD) -> bool:
    """Whether the merged pocket argmax_k ⟨b_k, ℓ_b⟩ for a ligand's binding-site embedding ℓ_b [P] lies within
    `threshold` Å of that ligand's pocket centre [3]."""
    chosen = int(np.argmax(pockets.embeddings @ ligand_pocket))
    return bool(np.linalg.norm(pockets.positions[chosen] - centre) < threshold)
