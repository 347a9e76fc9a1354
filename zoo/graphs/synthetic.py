"""Contextual stochastic block model (CSBM) graphs with planted informative features (numpy, seeded)."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from icml26zoo.graphs.graph import GraphsTuple, graph_from_edges
from icml26zoo.validation import check_bool, check_int, check_interval, check_positive

__all__ = ["CSBM", "csbm"]


class CSBM(NamedTuple):
    """A generated graph: `graph` (nodes = features X [N, D], symmetric edge list), `labels` [N] in [0, C),
    `informative` [k] (the columns whose class means differ)."""

    graph: GraphsTuple
    labels: np.ndarray
    informative: np.ndarray


def _edges(labels: np.ndarray, p_in: float, p_out: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Both directions of every undirected edge i < j drawn with p_in (same class) or p_out."""
    same = labels[:, None] == labels[None, :]
    draw = rng.random(same.shape) < np.where(same, p_in, p_out)
    upper_i, upper_j = np.nonzero(np.triu(draw, k=1))
    return (np.concatenate([upper_i, upper_j]).astype(np.int32),
            np.concatenate([upper_j, upper_i]).astype(np.int32))


def csbm(*, num_nodes: int = 2000, num_classes: int = 4, dims: int = 32, informative: int = 8,
         homophily: float = 0.8, mean_degree: float = 10.0, signal: float = 1.0, correlated: bool = False,
         seed: int = 0) -> CSBM:
    """A CSBM graph: balanced classes; an edge between same-class nodes with probability p_in and otherwise
    p_out, set so that the expected degree is `mean_degree` and the expected share of same-class edges is
    `homophily`. Features: k = `informative` random columns hold class mean (N(0, signal²) per class and column)
    plus N(0, 1) noise; the other columns are N(0, 1) noise, or (`correlated`) a random mix of the informative
    columns plus noise (the missing-feature setting, where other columns carry partial copies of the signal).
    """
    check_int("num_nodes", num_nodes, minimum=4)
    check_int("num_classes", num_classes, minimum=2)
    check_int("dims", dims)
    check_int("informative", informative, maximum=dims)
    check_interval("homophily", homophily, 0.0, 1.0)
    check_positive("mean_degree", mean_degree, finite=True)
    check_positive("signal", signal, finite=True)
    check_bool("correlated", correlated)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num_nodes) % num_classes)
    per_class = num_nodes / num_classes
    p_in = min(1.0, homophily * mean_degree / per_class)
    p_out = min(1.0, (1.0 - homophily) * mean_degree / (num_nodes - per_class))
    senders, receivers = _edges(labels, p_in, p_out, rng)
    columns = np.sort(rng.choice(dims, size=informative, replace=False))
    means = rng.normal(scale=signal, size=(num_classes, informative))
    x = rng.normal(size=(num_nodes, dims))
    x[:, columns] += means[labels]
    if correlated:
        rest = np.setdiff1d(np.arange(dims), columns)
        mixing = rng.normal(size=(informative, len(rest))) / np.sqrt(informative)
        x[:, rest] = x[:, columns] @ mixing + rng.normal(size=(num_nodes, len(rest)))
    graph = graph_from_edges(jnp.asarray(x, jnp.float32), senders, receivers)
    return CSBM(graph=graph, labels=labels.astype(np.int32), informative=columns)
