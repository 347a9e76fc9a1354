"""Metrics of RNA inverse folding (NumPy): sequence recovery, pair complementarity, a Nussinov fold with a
stacking bonus for structural fidelity (base-pair F1), and the AUROC of gates on true pair edges.

The fold (the spec's offline stand-in for ViennaRNA): maximise Σ pair weights (GC/CG 3, AU/UA 2, GU/UG 1) plus
STACK_BONUS for every pair (i, j) stacked on (i + 1, j - 1), hairpin loops of at least MIN_HAIRPIN unpaired bases.
    P[i, j] = w(i, j) + max(N[i + 1, j - 1], P[i + 1, j - 1] + STACK_BONUS)     (i pairs with j)
    N[i, j] = max(N[i + 1, j], N[i, j - 1], P[i, j], max_k N[i, k] + N[k + 1, j])
Sequences are int arrays over A, C, G, U = 0..3; pairs are partner arrays (partner[i] = j, -1 unpaired).
"""

from __future__ import annotations

import numpy as np

MIN_HAIRPIN = 3
STACK_BONUS = 1.0
# Pair weights indexed [base_i, base_j] over A, C, G, U.
PAIR_WEIGHT = np.zeros((4, 4))
for (a, b), weight in {(2, 1): 3.0, (0, 3): 2.0, (2, 3): 1.0}.items():
    PAIR_WEIGHT[a, b] = PAIR_WEIGHT[b, a] = weight
_NEG = -1e9


def complementary(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether bases a, b (int arrays of one shape) form a Watson-Crick or GU wobble pair."""
    return PAIR_WEIGHT[np.asarray(a), np.asarray(b)] > 0


def nussinov(sequence: np.ndarray) -> np.ndarray:
    """The partner array [L] of the best fold of `sequence` [L] (module docstring)."""
    seq = np.asarray(sequence, np.int64)
    n = len(seq)
    N, P = np.zeros((n + 1, n + 1)), np.full((n + 1, n + 1), _NEG)
    weight = PAIR_WEIGHT[seq[:, None], seq[None, :]]
    for span in range(MIN_HAIRPIN + 1, n):
        for i in range(n - span):
            j = i + span
            if weight[i, j] > 0:
                P[i, j] = weight[i, j] + max(N[i + 1, j - 1], P[i + 1, j - 1] + STACK_BONUS)
            split = np.max(N[i, i:j] + N[i + 1:j + 1, j]) if j > i else 0.0
            N[i, j] = max(N[i + 1, j], N[i, j - 1], P[i, j], split)
    partner = np.full(n, -1)
    _trace(N, P, 0, n - 1, partner, weight)
    return partner


def _trace(N: np.ndarray, P: np.ndarray, i: int, j: int, partner: np.ndarray, weight: np.ndarray) -> None:
    """Fills `partner` with the pairs of the optimum of N[i, j] (iterative over a stack of intervals)."""
    stack = [("N", i, j)]
    while stack:
        kind, i, j = stack.pop()
        if j - i <= MIN_HAIRPIN:
            continue
        if kind == "P":
            partner[i], partner[j] = j, i
            inner = P[i + 1, j - 1] + STACK_BONUS
            stack.append(("P" if inner >= N[i + 1, j - 1] and P[i + 1, j - 1] > _NEG / 2 else "N", i + 1, j - 1))
        elif N[i, j] == N[i + 1, j]:
            stack.append(("N", i + 1, j))
        elif N[i, j] == N[i, j - 1]:
            stack.append(("N", i, j - 1))
        elif N[i, j] == P[i, j]:
            stack.append(("P", i, j))
        else:
            k = i + int(np.argmax(N[i, i:j] + N[i + 1:j + 1, j]))
            stack += [("N", i, k), ("N", k + 1, j)]


def pair_set(partner: np.ndarray) -> set[tuple[int, int]]:
    return {(i, int(j)) for i, j in enumerate(partner) if j > i}


def base_pair_f1(predicted: np.ndarray, target: np.ndarray) -> float:
    """F1 of the predicted pairs against the target pairs (partner arrays); 1 when both have none."""
    found, wanted = pair_set(predicted), pair_set(target)
    if not found and not wanted:
        return 1.0
    hits = len(found & wanted)
    return 2.0 * hits / (len(found) + len(wanted))


def design_metrics(designed: np.ndarray, native: np.ndarray, partner: np.ndarray, mask: np.ndarray
                   ) -> dict[str, float]:
    """Means over the rows of: recovery (fraction of real nucleotides equal to the native), pair complementarity
    (fraction of target pairs with WC or GU bases; rows without pairs skipped), base-pair F1 of the Nussinov fold
    of the designed sequence. designed, native, partner int [B, L]; mask [B, L]."""
    recovery, complement, f1 = [], [], []
    for row in range(designed.shape[0]):
        length = int(np.sum(mask[row] > 0))
        seq, nat, part = designed[row, :length], native[row, :length], partner[row, :length]
        recovery.append(float(np.mean(seq == nat)))
        paired = np.flatnonzero(part > np.arange(length))
        if len(paired):
            complement.append(float(np.mean(complementary(seq[paired], seq[part[paired]]))))
        f1.append(base_pair_f1(nussinov(seq), part))
    return {"recovery": float(np.mean(recovery)), "pair_complementarity": float(np.mean(complement)),
            "bp_f1": float(np.mean(f1))}


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of scores [n] for binary labels [n] (ties count one half); NaN without both."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels, bool)
    positives, negatives = scores[labels], scores[~labels]
    if not len(positives) or not len(negatives):
        return float("nan")
    order = np.sort(negatives)
    below = np.searchsorted(order, positives, side="left")
    ties = np.searchsorted(order, positives, side="right") - below
    return float(np.mean((below + 0.5 * ties) / len(negatives)))


def pair_edge_auroc(gates: np.ndarray, nbr_idx: np.ndarray, nbr_mask: np.ndarray, sequential: np.ndarray,
                    partner: np.ndarray) -> float:
    """AUROC of gates [B, L, K] ranking true base-pair edges (j = partner of i) above the other learnable
    candidates (real, not i ± 1, not i itself)."""
    index = np.arange(gates.shape[1])[None, :, None]
    learnable = (nbr_mask > 0) & (sequential == 0) & (nbr_idx != index)
    labels = nbr_idx == partner[:, :, None]
    return auroc(gates[learnable], labels[learnable])
