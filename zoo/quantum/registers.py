"""The index register of SAQNN (a reconstruction; see `icml26zoo.quantum.saqnn`): which basis function each
basis state |k⟩ stands for, and the probabilities p_k = α_k² of the multiplexed-R_y state-preparation tree.

A register of `qubits` qubits per input dimension and `dims` dimensions has Q = qubits · dims qubits and
n = 2^Q basis states; dimension i owns qubits i·qubits … (i+1)·qubits − 1 (most significant first), holding an
unsigned integer u_i ∈ [0, N), N = 2^qubits. Its frequency is

- "fourier": the two's-complement value k_i = u_i − N·[u_i ≥ N/2] ∈ {−N/2, …, N/2 − 1} (basis e^{i k_i x_i});
- "chebyshev": u_i itself (basis T_{u_i}(t_i) = cos(u_i arccos t_i), degrees 0 … N − 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_choice, check_int

__all__ = ["BASES", "MAX_QUBITS", "check_register", "frequencies", "num_levels", "tree_amplitudes",
           "tree_probabilities"]

BASES = ("fourier", "chebyshev")
# 2^24 basis functions already need gigabytes for a batch of inputs; larger registers are a mistake here.
MAX_QUBITS = 24


def check_register(qubits: int, dims: int, basis: str = "fourier") -> int:
    """Checks the register's size and basis (ValueError naming the argument); returns n = 2^(qubits · dims)."""
    check_int("qubits", qubits, minimum=1, maximum=MAX_QUBITS)
    check_int("dims", dims, minimum=1, maximum=MAX_QUBITS)
    check_choice("basis", basis, BASES)
    if qubits * dims > MAX_QUBITS:
        raise ValueError(f"qubits * dims must be at most {MAX_QUBITS} (2^{MAX_QUBITS} basis functions), got "
                         f"{qubits} * {dims} = {qubits * dims}")
    return 2 ** (qubits * dims)


def frequencies(qubits: int, dims: int, basis: str = "fourier") -> np.ndarray:
    """The multi-index of every basis state: [n, dims] integers, row k = (k_1, …, k_dims) of state |k⟩
    (module docstring: two's complement in "fourier", unsigned in "chebyshev")."""
    check_register(qubits, dims, basis)
    size = 2**qubits
    unsigned = np.stack(np.meshgrid(*[np.arange(size)] * dims, indexing="ij"), -1).reshape(-1, dims)
    if basis == "chebyshev":
        return unsigned
    return np.where(unsigned >= size // 2, unsigned - size, unsigned)


def num_levels(num_angles: int) -> int:
    """Q for a tree of 2^Q − 1 angles (ValueError otherwise)."""
    levels = int(np.log2(num_angles + 1)) if num_angles > 0 else 0
    if num_angles < 1 or 2**levels - 1 != num_angles:
        raise ValueError(f"theta must hold 2^Q − 1 angles for a Q-qubit register (1, 3, 7, 15, …), "
                         f"got {num_angles}")
    return levels


def _tree(theta: jax.Array, left, right) -> jax.Array:
    """Leaf values of the binary tree whose node (ℓ, c) holds angle theta[2^ℓ − 1 + c]: the product along the
    path of left(θ/2) for a 0 bit and right(θ/2) for a 1 bit; leaf 2c + b is child b of node c."""
    levels = num_levels(theta.shape[-1])
    leaves = jnp.ones(theta.shape[:-1] + (1,), theta.dtype)
    for level in range(levels):
        angles = theta[..., 2**level - 1: 2 ** (level + 1) - 1] / 2
        leaves = jnp.stack([leaves * left(angles), leaves * right(angles)], -1).reshape(theta.shape[:-1] + (-1,))
    return leaves


def tree_amplitudes(theta: jax.Array) -> jax.Array:
    """α [..., n] of PREP(θ)|0⟩ for theta [..., n − 1] (real, signed when some θ leaves [0, π]; Σ α² = 1)."""
    return _tree(jnp.asarray(theta), jnp.cos, jnp.sin)


def tree_probabilities(theta: jax.Array) -> jax.Array:
    """p [..., n] = α²: the leaf masses of the tree, products of cos²(θ/2) / sin²(θ/2) along each path."""
    return _tree(jnp.asarray(theta), lambda a: jnp.cos(a) ** 2, lambda a: jnp.sin(a) ** 2)
