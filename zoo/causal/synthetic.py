"""Synthetic nonlinear additive-noise models (ANMs) with a known DAG, generated from a seed (numpy only).

x_j = f_j(x_pa(j)) + s_j e_j over an Erdős–Rényi DAG (random causal order, each of the d(d−1)/2 ordered pairs an
edge with probability degree / (d − 1), so each node has `degree` neighbours on average and the graph about
degree·d/2 edges); f_j is a random one-hidden-layer tanh MLP (10 units) of the parents (a constant 0 for a root);
e_j is standardised noise of a type drawn per node from NOISES, s_j ~ U[0.5, 2].
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from icml26zoo.validation import check_choice, check_int, check_positive

__all__ = ["NOISES", "ANMSample", "erdos_renyi_dag", "sample_anm", "standard_noise"]

NOISES = ("gaussian", "laplace", "uniform", "gumbel", "student_t5")
HIDDEN = 10


class ANMSample(NamedTuple):
    """data [n, d], the true DAG [d, d] (int, edge k → j at [k, j]), noise types [d] and noise scales [d]."""

    data: np.ndarray
    dag: np.ndarray
    noises: tuple[str, ...]
    scales: np.ndarray


def erdos_renyi_dag(rng: np.random.Generator, num_nodes: int, degree: float = 2.0) -> np.ndarray:
    """A random DAG [d, d] (int): a random order, each forward pair an edge with probability degree / (d − 1)."""
    d = check_int("num_nodes", num_nodes, minimum=2)
    p = min(1.0, check_positive("degree", degree, finite=True) / (d - 1))
    lower = np.triu(rng.random((d, d)) < p, 1).astype(np.int64)
    order = rng.permutation(d)
    return lower[np.ix_(order, order)]


def standard_noise(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """n draws [n] of the noise `kind` (one of NOISES), scaled to mean 0 and variance 1."""
    check_choice("kind", kind, NOISES)
    if kind == "gaussian":
        return rng.standard_normal(n)
    if kind == "laplace":
        return rng.laplace(size=n) / np.sqrt(2.0)
    if kind == "uniform":
        return rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), n)
    if kind == "gumbel":
        return (rng.gumbel(size=n) - np.euler_gamma) / (np.pi / np.sqrt(6.0))
    return rng.standard_t(5, n) / np.sqrt(5.0 / 3.0)


def _random_mlp(rng: np.random.Generator, num_parents: int):
    """f(parents [n, p]) = Σ_h v_h tanh(w_h · parents + c_h), |w| ~ U[0.5, 1.5], |v| ~ 3 U[0.5, 1.5] / √10, random signs
    (f has a standard deviation of about 2 on standardised parents, against noise scales in [0.5, 2])."""
    signs = lambda shape: rng.choice([-1.0, 1.0], shape)  # noqa: E731
    w = rng.uniform(0.5, 1.5, (num_parents, HIDDEN)) * signs((num_parents, HIDDEN))
    c = rng.uniform(-1.0, 1.0, HIDDEN)
    v = rng.uniform(0.5, 1.5, HIDDEN) * signs(HIDDEN) * 3.0 / np.sqrt(HIDDEN)
    return lambda parents: np.tanh(parents @ w + c) @ v


def sample_anm(seed: int, num_nodes: int, num_samples: int, *, degree: float = 2.0,
               noises: tuple[str, ...] = NOISES, dag: np.ndarray | None = None) -> ANMSample:
    """One ANM and n = num_samples draws from it; `dag` [d, d] fixes the graph instead of drawing one. Parents'
    values enter f_j standardised (so f's inputs have unit scale whatever the depth)."""
    n = check_int("num_samples", num_samples, minimum=2)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    graph = erdos_renyi_dag(rng, num_nodes, degree) if dag is None else np.asarray(dag, dtype=np.int64)
    d = graph.shape[0]
    if graph.shape != (d, d) or d != num_nodes:
        raise ValueError(f"dag must have shape ({num_nodes}, {num_nodes}), got {graph.shape}")
    for kind in noises:
        check_choice("noises[i]", kind, NOISES)
    kinds = tuple(rng.choice(noises) for _ in range(d))
    scales = rng.uniform(0.5, 2.0, d)
    data = np.zeros((n, d))
    for j in _topological_order(graph):
        parents = np.flatnonzero(graph[:, j])
        signal = 0.0
        if parents.size:
            inputs = data[:, parents]
            signal = _random_mlp(rng, parents.size)((inputs - inputs.mean(0)) / inputs.std(0))
        data[:, j] = signal + scales[j] * standard_noise(rng, kinds[j], n)
    return ANMSample(data, graph, kinds, scales)


def _topological_order(graph: np.ndarray) -> list[int]:
    remaining, order = set(range(graph.shape[0])), []
    while remaining:
        ready = [j for j in sorted(remaining) if not any(graph[k, j] for k in remaining)]
        if not ready:
            raise ValueError("dag must be acyclic, got a graph with a directed cycle")
        order.append(ready[0])
        remaining.remove(ready[0])
    return order
