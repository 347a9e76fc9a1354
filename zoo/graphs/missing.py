"""GNNmim inputs, the mean-imputation baseline and the five missingness mechanisms of Ferrini et al. (ICML 2026).

Follows the paper's official code (francescoferrini/gnnmim, `main.py`, `utils.py`), rewritten in numpy. Every
mechanism returns a boolean mask M [N, D] (True = missing) and leaves no column entirely missing (one random
entry of such a column is unmasked, as the official code does). Differences from that code: LDMCAR ranks the
features by a binned (plug-in) mutual-information estimate of our own; FDMNAR and CDMNAR cap the high-rate
group at probability 1 and recompute the low rate so that the overall rate stays p (the ratio then falls below
r, which only happens at high p); one rate p applies to all nodes (the paper's grid sets p_train = p_test).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from icml26zoo.extras import require_extras
from icml26zoo.validation import check_choice, check_int, check_positive, check_shape, check_unit_interval

__all__ = ["MECHANISMS", "cdmnar", "cdmnar_important_cells", "fdmnar", "fdmnar_signal_rows", "gnnmim_inputs",
           "ldmcar", "make_missing", "mean_impute", "mutual_information", "smcar", "umcar"]

MECHANISMS = ("umcar", "smcar", "ldmcar", "fdmnar", "cdmnar")
DEFAULT_FDMNAR_RATIO = 0.95 / 0.65  # the official default: signal cells 0.95 vs 0.65


def _features(x: Any) -> np.ndarray:
    check_shape("x", x, (None, None), "[N, D]")
    return np.asarray(x, dtype=np.float64)


def _check_labels(labels: Any, num_nodes: int) -> np.ndarray:
    check_shape("labels", labels, (num_nodes,), "[N] (one per node)")
    return np.asarray(labels)


def _no_empty_column(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unmasks one random entry of every column that is missing everywhere."""
    for column in np.flatnonzero(mask.all(axis=0)):
        mask[rng.integers(mask.shape[0]), column] = False
    return mask


def umcar(x: Any, p: float, *, seed: int = 0) -> np.ndarray:
    """Uniform MCAR: each entry of x [N, D] missing independently with probability p. Returns M [N, D]."""
    x, p = _features(x), check_unit_interval("p", p)
    rng = np.random.default_rng(seed)
    return _no_empty_column(rng.random(x.shape) < p, rng)


def smcar(x: Any, p: float, *, seed: int = 0) -> np.ndarray:
    """Structural MCAR: whole nodes (all their features) missing with probability p. Returns M [N, D]."""
    x, p = _features(x), check_unit_interval("p", p)
    rng = np.random.default_rng(seed)
    rows = rng.random(x.shape[0]) < p
    return _no_empty_column(np.repeat(rows[:, None], x.shape[1], axis=1), rng)


def mutual_information(x: Any, labels: Any, *, bins: int = 10) -> np.ndarray:
    """Plug-in mutual information (nats) between each column of x [N, D], cut into `bins` quantile bins, and
    the labels [N]. Returns [D]."""
    x = _features(x)
    labels = _check_labels(labels, x.shape[0])
    check_int("bins", bins, minimum=2)
    _, label_ids = np.unique(labels, return_inverse=True)
    scores = np.zeros(x.shape[1])
    for column in range(x.shape[1]):
        edges = np.unique(np.quantile(x[:, column], np.linspace(0, 1, bins + 1)[1:-1]))
        joint = np.zeros((len(edges) + 1, label_ids.max() + 1))
        np.add.at(joint, (np.searchsorted(edges, x[:, column], side="right"), label_ids), 1.0)
        joint /= joint.sum()
        outer = joint.sum(axis=1, keepdims=True) * joint.sum(axis=0, keepdims=True)
        present = joint > 0
        scores[column] = float(np.sum(joint[present] * np.log(joint[present] / outer[present])))
    return scores


def ldmcar(x: Any, labels: Any, p: float, *, seed: int = 0) -> np.ndarray:
    """Label-dependent MCAR: the round(p·D) columns with the highest mutual information with the labels are
    missing for every node. Returns M [N, D]."""
    x, p = _features(x), check_unit_interval("p", p)
    order = np.argsort(-mutual_information(x, labels), kind="stable")
    mask = np.zeros(x.shape, dtype=bool)
    mask[:, order[: int(round(p * x.shape[1]))]] = True
    return _no_empty_column(mask, np.random.default_rng(seed))


def _two_rate_mask(important: np.ndarray, p: float, ratio: float, rng: np.random.Generator) -> np.ndarray:
    """Cells in `important` missing with p_hi = r·p_lo, the rest with p_lo, p_lo = p / (s r + 1 - s) with s the
    important fraction (overall rate p); if p_hi > 1 the important cells all go and p_lo = (p - s) / (1 - s)."""
    share = float(important.mean())
    low = p / (share * ratio + 1.0 - share)
    high = ratio * low
    if high > 1.0:
        high, low = 1.0, (p - share) / (1.0 - share)
    probability = np.where(important, high, low)
    return rng.random(important.shape) < probability


def fdmnar_signal_rows(x: Any, *, quantile: float = 0.9, side: str = "high") -> np.ndarray:
    """The FDMNAR "signal" cells [N, D]: per column z-scored value >= its `quantile` ("high"), <= its
    1 - quantile ("low") or either ("both")."""
    x = _features(x)
    check_choice("side", side, ("high", "low", "both"))
    quantile = check_unit_interval("quantile", quantile)
    z = (x - x.mean(axis=0)) / np.maximum(x.std(axis=0), 1e-12)
    high = z >= np.quantile(z, quantile, axis=0)
    low = z <= np.quantile(z, 1.0 - quantile, axis=0)
    return {"high": high, "low": low, "both": high | low}[side]


def fdmnar(x: Any, p: float, *, ratio: float = DEFAULT_FDMNAR_RATIO, quantile: float = 0.9, side: str = "high",
           whole_rows: bool = False, seed: int = 0) -> np.ndarray:
    """Feature-dependent MNAR: signal cells (`fdmnar_signal_rows`) missing r times as often as the rest, the
    overall rate p. `whole_rows`: a node with any signal cell loses all its features with the high rate instead.
    Returns M [N, D]."""
    x, p = _features(x), check_unit_interval("p", p)
    check_positive("ratio", ratio, finite=True)
    rng = np.random.default_rng(seed)
    signal = fdmnar_signal_rows(x, quantile=quantile, side=side)
    if whole_rows:
        rows = _two_rate_mask(signal.any(axis=1), p, ratio, rng)
        return _no_empty_column(np.repeat(rows[:, None], x.shape[1], axis=1), rng)
    return _no_empty_column(_two_rate_mask(signal, p, ratio, rng), rng)


def cdmnar_important_cells(x: Any, labels: Any, *, positive_class: Any = None, seed: int = 0) -> np.ndarray:
    """The CDMNAR "important" cells [N, D]: a depth-2 decision tree is fit to "label == positive_class" (default:
    the most frequent label); for a node whose leaf predicts positive, the features tested on its decision path
    are important. Needs scikit-learn (the `[sklearn]` extra)."""
    x = _features(x)
    labels = _check_labels(labels, x.shape[0])
    require_extras("sklearn", what="icml26zoo.graphs.cdmnar")
    from sklearn.tree import DecisionTreeClassifier  # optional extra: imported only here

    if positive_class is None:
        values, counts = np.unique(labels, return_counts=True)
        positive_class = values[np.argmax(counts)]
    target = labels == positive_class
    tree = DecisionTreeClassifier(max_depth=2, random_state=seed).fit(x, target)
    paths = tree.decision_path(x).toarray().astype(bool)  # [N, tree nodes]
    inner = tree.tree_.feature >= 0
    positive_leaf = tree.predict(x).astype(bool)
    cells = np.zeros(x.shape, dtype=bool)
    for node in np.flatnonzero(inner):
        on_path = paths[:, node] & positive_leaf
        cells[on_path, tree.tree_.feature[node]] = True
    return cells


def cdmnar(x: Any, labels: Any, p: float, *, ratio: float = 2.0, positive_class: Any = None,
           seed: int = 0) -> np.ndarray:
    """Class-dependent MNAR: important cells (`cdmnar_important_cells`) missing r times as often as the rest,
    overall rate p. Returns M [N, D]. Needs the `[sklearn]` extra."""
    x, p = _features(x), check_unit_interval("p", p)
    check_positive("ratio", ratio, finite=True)
    important = cdmnar_important_cells(x, labels, positive_class=positive_class, seed=seed)
    rng = np.random.default_rng(seed)
    return _no_empty_column(_two_rate_mask(important, p, ratio, rng), rng)


def make_missing(mechanism: str, x: Any, labels: Any, p: float, *, seed: int = 0) -> np.ndarray:
    """The mask M [N, D] of `mechanism` (one of MECHANISMS, default options) at rate p."""
    check_choice("mechanism", mechanism, MECHANISMS)
    if mechanism == "umcar":
        return umcar(x, p, seed=seed)
    if mechanism == "smcar":
        return smcar(x, p, seed=seed)
    if mechanism == "fdmnar":
        return fdmnar(x, p, seed=seed)
    return {"ldmcar": ldmcar, "cdmnar": cdmnar}[mechanism](x, labels, p, seed=seed)


def _observed(x: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
    x = _features(x)
    check_shape("mask", mask, x.shape, "[N, D] (as x)")
    return x, np.asarray(mask, dtype=bool)


def gnnmim_inputs(x: Any, mask: Any) -> jnp.ndarray:
    """GNNmim's input Z = [X̃ with missing entries set to 0, 1 - M] [N, 2D] (the observed indicator, as the
    official code concatenates) for features x [N, D] (missing entries may hold NaN) and mask M [N, D]."""
    x, mask = _observed(x, mask)
    filled = np.where(mask, 0.0, x)
    return jnp.asarray(np.concatenate([filled, 1.0 - mask], axis=1), jnp.float32)


def mean_impute(x: Any, mask: Any) -> jnp.ndarray:
    """The gcnmi baseline's input [N, D]: missing entries replaced by their column's mean over observed entries
    (every node; 0 for a column with none observed)."""
    x, mask = _observed(x, mask)
    observed = ~mask
    counts = observed.sum(axis=0)
    means = np.where(counts > 0, np.where(observed, x, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)
    return jnp.asarray(np.where(mask, means[None, :], x), jnp.float32)
