"""Gate matrices of the SAQNN circuit and their embedding into an n-qubit register (a reconstruction; see
`icml26zoo.quantum.saqnn`).

Convention: qubit 0 is the most significant bit of a basis-state index, so the index of |b_0 b_1 … b_{Q−1}⟩ is
Σ_j b_j 2^{Q−1−j}, and the first level of the state-preparation tree acts on qubit 0. Every function takes the
dtype its complex matrices are built in (complex64 by default; pass jnp.complex128 under `jax.enable_x64(True)`
for the verification circuits).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["HADAMARD", "hadamard", "phase", "ry", "rz", "single_qubit", "uniformly_controlled"]

HADAMARD = ((1.0, 1.0), (1.0, -1.0))  # times 1/√2, see `hadamard`


def ry(theta: jax.Array, dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """R_y(θ) = exp(−iθY/2) = [[cos θ/2, −sin θ/2], [sin θ/2, cos θ/2]]: [..., 2, 2] for θ of shape [...]."""
    theta = jnp.asarray(theta)
    c, s = jnp.cos(theta / 2), jnp.sin(theta / 2)
    return jnp.stack([jnp.stack([c, -s], -1), jnp.stack([s, c], -1)], -2).astype(dtype)


def rz(lam: jax.Array, dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """R_z(λ) = exp(−iλZ/2) = diag(e^{−iλ/2}, e^{iλ/2}): [..., 2, 2] for λ of shape [...]."""
    half = jnp.asarray(lam).astype(dtype) / 2
    zero = jnp.zeros_like(half)
    return jnp.stack([jnp.stack([jnp.exp(-1j * half), zero], -1), jnp.stack([zero, jnp.exp(1j * half)], -1)], -2)


def phase(lam: jax.Array, dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """The phase gate P(λ) = diag(1, e^{iλ}): [..., 2, 2] for λ of shape [...]."""
    lam = jnp.asarray(lam).astype(dtype)
    return jnp.stack([jnp.stack([jnp.ones_like(lam), jnp.zeros_like(lam)], -1),
                      jnp.stack([jnp.zeros_like(lam), jnp.exp(1j * lam)], -1)], -2)


def hadamard(dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """H = [[1, 1], [1, −1]] / √2: [2, 2]."""
    return jnp.asarray(HADAMARD, dtype) / jnp.sqrt(jnp.asarray(2.0, dtype))


def single_qubit(gate: jax.Array, qubit: int, num_qubits: int) -> jax.Array:
    """gate [2, 2] acting on `qubit` of a `num_qubits`-qubit register: I_{2^qubit} ⊗ gate ⊗ I_rest, [2^Q, 2^Q]."""
    before = jnp.eye(2**qubit, dtype=gate.dtype)
    after = jnp.eye(2 ** (num_qubits - qubit - 1), dtype=gate.dtype)
    return jnp.kron(jnp.kron(before, gate), after)


def uniformly_controlled(gates: jax.Array, num_qubits: int) -> jax.Array:
    """A uniformly controlled (multiplexed) single-qubit gate: gates [2^ℓ, 2, 2] act on qubit ℓ, the one applied
    being gates[c] when qubits 0..ℓ−1 hold the integer c; qubits ℓ+1.. are untouched. Returns [2^Q, 2^Q]:
    Σ_c |c⟩⟨c| ⊗ gates[c] ⊗ I, block diagonal over the control value c."""
    controls = gates.shape[0]
    rest = 2**num_qubits // (2 * controls)
    full = jnp.einsum("cd,cij,ab->ciadjb", jnp.eye(controls, dtype=gates.dtype), gates,
                      jnp.eye(rest, dtype=gates.dtype))
    return full.reshape(2**num_qubits, 2**num_qubits)
