"""k-sparse Boolean functions with chain-of-thought tokens (Lyu, Jia, Cai, Zhu, arXiv 2511.17852):
k-PARITY, k-AND and k-OR, each computed along a binary tree of one fixed 2-sparse function g (XOR, AND, OR),
as next-token rows whose loss is on the chain tokens only.

An example is x ∈ {0, 1}^d (i.i.d. Bernoulli(ρ) bits) followed by the k - 1 chain tokens z_{d+1..d+k-1}:

    x_1 ... x_d  z_{d+1} ... z_{d+k-1},    z_j = g(z_{a(j)}, z_{b(j)}),    z_{d+k-1} = f(x)

The secret support S = (i_1 < ... < i_k) is fixed by the seed (SeedSequence([seed, 2]), shared by both
splits: evaluate on fresh x, never on a fresh S). The tree is built level by level: level 1 combines the
leaves in pairs (x_{i_1}, x_{i_2}), (x_{i_3}, x_{i_4}), ...; each next level combines the previous level's
nodes in pairs, and a node left without a partner (k not a power of 2) moves up unchanged, so there are
always k - 1 chain tokens and the last is f(x) = g over all of S. Parent positions a(j), b(j) are
`chain_parents`. By default ρ makes f(x) balanced: 1/2 for parity, 2^(-1/k) for AND, 1 - 2^(-1/k) for OR
(a constant f would teach nothing). The exact token format of the paper is a reconstruction.

Vocabulary layout (size 3):
    0                      padding (never inside an example)
    1, 2                   bit 0, bit 1 (bit b is token 1 + b), for inputs and chain tokens alike

The label of an example is f(x).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, Task, TaskBuilder, TaskDataset, TaskOptions, check_option, make_config

GATES = {"parity": np.bitwise_xor, "and": np.bitwise_and, "or": np.bitwise_or}


@dataclasses.dataclass(frozen=True)
class SparseBooleanOptions(TaskOptions):
    """k-sparse Boolean chain: d input bits, support size k, function, bit probability ρ (None = balanced)."""

    num_bits: int = 16
    sparsity: int = 4
    function: Literal["parity", "and", "or"] = "parity"
    bit_probability: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("num_bits", self.num_bits, 2, 4096)
        check_option("sparsity", self.sparsity, 2, self.num_bits)
        rho = self.bit_probability
        if rho is not None and not 0 < rho < 1:
            raise ValueError(f"{FIELD} option 'bit_probability' must be None or lie in (0, 1), got {rho!r}")


def bit_probability(options: SparseBooleanOptions) -> float:
    """ρ: the option, or the value that makes f(x) balanced."""
    if options.bit_probability is not None:
        return options.bit_probability
    balanced = 2.0 ** (-1.0 / options.sparsity)
    return {"parity": 0.5, "and": balanced, "or": 1.0 - balanced}[options.function]


def support(options: SparseBooleanOptions) -> np.ndarray:
    """[k] int sorted input positions S, drawn from SeedSequence([seed, 2])."""
    rng = np.random.default_rng(np.random.SeedSequence([options.seed, 2]))
    return np.sort(rng.choice(options.num_bits, size=options.sparsity, replace=False))


def chain_parents(leaves: np.ndarray, first_position: int) -> np.ndarray:
    """[k - 1, 2] sequence positions (a(j), b(j)) of the parents of each chain token, in level order.

    `leaves` [k] are the support's positions; chain token j sits at position first_position + j.
    """
    nodes, parents = [int(i) for i in leaves], []
    while len(nodes) > 1:
        paired = []
        for left, right in zip(nodes[0:-1:2], nodes[1::2], strict=False):
            parents.append((left, right))
            paired.append(first_position + len(parents) - 1)
        nodes = paired + (nodes[-1:] if len(nodes) % 2 else [])
    return np.array(parents, np.int64).reshape(-1, 2)


def chain_levels(sparsity: int) -> np.ndarray:
    """[k - 1] tree level of each chain token (1 = it combines two leaves), for per-level accuracy."""
    depth = {i: 0 for i in range(sparsity)}
    levels = []
    for left, right in chain_parents(np.arange(sparsity), sparsity):
        levels.append(1 + max(depth[int(left)], depth[int(right)]))
        depth[sparsity + len(levels) - 1] = levels[-1]
    return np.array(levels, np.int64)


class SparseBoolean(Task):
    options_class = SparseBooleanOptions

    @staticmethod
    def length(options: SparseBooleanOptions) -> int:
        return options.num_bits + options.sparsity - 1

    @staticmethod
    def vocab_size(options: SparseBooleanOptions) -> int:
        return 3

    @staticmethod
    def loss_weights(options: SparseBooleanOptions) -> np.ndarray:
        weights = np.zeros(SparseBoolean.length(options), np.float32)
        weights[options.num_bits :] = 1.0
        return weights

    @staticmethod
    def generate(options: SparseBooleanOptions, num_examples: int, seed) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        d, gate = options.num_bits, GATES[options.function]
        bits = np.zeros((num_examples, SparseBoolean.length(options)), np.int64)
        bits[:, :d] = rng.random((num_examples, d)) < bit_probability(options)
        for j, (a, b) in enumerate(chain_parents(support(options), d)):
            bits[:, d + j] = gate(bits[:, a], bits[:, b])
        return (1 + bits).astype(np.int32), bits[:, -1].astype(np.int32)


class ZooSparseBoolean(TaskBuilder):
    """k-sparse Boolean chain rows."""

    task = SparseBoolean
    BUILDER_CONFIGS = [make_config(SparseBooleanOptions())]


@register_dataset("sparse_boolean")
class SparseBooleanDataset(TaskDataset):
    """Next-token rows with the loss on the chain tokens; whole examples per row when packed."""

    builder_class, name = ZooSparseBoolean, "sparse_boolean"
