"""Gate-level state-vector simulation of the SAQNN circuit (a RECONSTRUCTION: the paper names the three blocks,
state preparation by multiplexed R_y gates, spectrum selection by re-uploading x, phase injection by trainable
Z-rotations, and the readout ⟨0|U†OU|0⟩^{1/2} with O = |0⟩⟨0|; the gates below are the zoo's construction of
those blocks). It exists to verify the closed form `icml26zoo.quantum.saqnn.amplitude` that training uses: every
block is built from explicit 2 × 2 gates embedded as dense 2^Q × 2^Q matrices and applied to a state vector, so it
is meant for small registers (Q ≲ 10). Run it under `jax.enable_x64(True)` with dtype=jnp.complex128 for 1e-10
agreement.

Circuit U(x; θ, φ) on Q = qubits · dims index qubits (see `icml26zoo.quantum.registers` for the ordering):

1. PREP(θ): for level ℓ = 0 … Q − 1 a uniformly controlled R_y on qubit ℓ with 2^ℓ angles (controls: qubits
   0 … ℓ − 1), n − 1 angles in all; PREP|0⟩ = Σ_k α_k |k⟩ with α_k² the tree probabilities.
2. SELECT(x): one phase gate P(w_j x_i) per qubit j of dimension i's block, w_j = 2^{(bits below j)}, and
   w = −2^{qubits−1} on the block's most significant (sign) qubit in the Fourier basis, so that the product is
   diag(e^{i k·x}) with k the two's-complement multi-index (Chebyshev: no sign qubit, k the unsigned degree).
3. PHASE(φ): diag(e^{iφ_k}) written as a global phase e^{iγ} times, for each level ℓ, a uniformly controlled R_z
   on qubit ℓ with 2^ℓ angles (`phase_angles`: a Haar-like transform of φ; n parameters in all).
4. PREP(θ)†.

Chebyshev basis: x_i = arccos t_i is uploaded, and one ancilla qubit per input dimension (H, then the sign of
x_i in SELECT controlled by it, then H) averages e^{ik_i x_i} with e^{−ik_i x_i}, so ⟨0|U|0⟩ carries
Π_i cos(k_i arccos t_i) = Π_i T_{k_i}(t_i) for every θ, φ (the ancillas are the zoo's way of making the basis
real; the paper's summary only says the basis is switchable).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from icml26zoo.quantum.gates import hadamard, phase, ry, rz, single_qubit, uniformly_controlled
from icml26zoo.quantum.registers import num_levels
from icml26zoo.validation import check_choice, check_int

__all__ = ["MAX_SIMULATED_QUBITS", "apply", "circuit_amplitude", "circuit_gates", "circuit_unitary", "hadamard_test",
           "phase_angles", "phase_unitary", "prep_unitary", "readout_probability", "select_unitary"]

# Dense 2^Q × 2^Q gates: 12 qubits is already 16M entries per gate.
MAX_SIMULATED_QUBITS = 12


def prep_unitary(theta: jax.Array, dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """PREP(θ) [n, n] for theta [n − 1]: the product of the Q levels' uniformly controlled R_y gates."""
    levels = num_levels(theta.shape[-1])
    unitary = jnp.eye(2**levels, dtype=dtype)
    for level in range(levels):
        angles = theta[2**level - 1: 2 ** (level + 1) - 1]
        unitary = uniformly_controlled(ry(angles, dtype), levels) @ unitary
    return unitary


def phase_angles(phi: jax.Array) -> tuple[jax.Array, list[jax.Array]]:
    """(γ, [λ_0 [1], λ_1 [2], …, λ_{Q−1} [2^{Q−1}]]) with diag(e^{iφ}) = e^{iγ} Π_ℓ UC-R_z(λ_ℓ) on qubit ℓ.

    Why this works: R_z(λ) adds −λ/2 to a |0⟩ child and +λ/2 to a |1⟩ child, so from the leaves up each node's
    angle is (mean phase of its 1-subtree) − (mean phase of its 0-subtree), and γ is the mean of all φ."""
    levels = num_levels(phi.shape[-1] - 1)
    means, angles = phi, []
    for _ in range(levels):
        pairs = means.reshape(-1, 2)
        angles.insert(0, pairs[:, 1] - pairs[:, 0])
        means = pairs.mean(axis=1)
    return means[0], angles


def phase_unitary(phi: jax.Array, dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """PHASE(φ) [n, n] for phi [n], built from the global phase and the uniformly controlled R_z cascade."""
    gamma, angles = phase_angles(phi)
    levels = len(angles)
    unitary = jnp.exp(1j * gamma.astype(dtype)) * jnp.eye(2**levels, dtype=dtype)
    for lam in angles:  # level ℓ's angles act on qubit ℓ, controlled by the qubits above it
        unitary = uniformly_controlled(rz(lam, dtype), levels) @ unitary
    return unitary


def _bit_weights(qubits: int, signed: bool) -> list[int]:
    """The integer weight of each qubit of one dimension's block, most significant first."""
    weights = [2 ** (qubits - 1 - j) for j in range(qubits)]
    if signed:
        weights[0] = -weights[0]  # two's complement: the sign bit is worth −2^{qubits−1}
    return weights


def select_unitary(angles: jax.Array, qubits: int, *, signed: bool, dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """SELECT(x) [n, n] = diag(e^{i k·x}) for angles x [dims], from one phase gate per qubit (module docstring);
    signed: two's-complement (Fourier) indices, else unsigned (Chebyshev)."""
    dims = angles.shape[0]
    total = qubits * dims
    unitary = jnp.eye(2**total, dtype=dtype)
    for i in range(dims):
        for j, weight in enumerate(_bit_weights(qubits, signed)):
            unitary = single_qubit(phase(weight * angles[i], dtype), i * qubits + j, total) @ unitary
    return unitary


def _on_index(gate: jax.Array, ancillas: int) -> jax.Array:
    """gate acting on the index register below `ancillas` ancilla qubits (I_{2^a} ⊗ gate)."""
    return jnp.kron(jnp.eye(2**ancillas, dtype=gate.dtype), gate)


def _sign_controlled_select(angles: jax.Array, qubits: int, dtype) -> jax.Array:
    """Σ_s |s⟩⟨s| ⊗ SELECT((−1)^s ∘ x): ancilla i (qubit i) flips the sign of x_i."""
    dims = angles.shape[0]
    patterns = jnp.arange(2**dims)[:, None] >> jnp.arange(dims - 1, -1, -1)[None, :] & 1
    blocks = jnp.stack([select_unitary(jnp.where(patterns[s] == 1, -angles, angles), qubits, signed=False,
                                       dtype=dtype) for s in range(2**dims)])
    size = blocks.shape[-1]
    full = jnp.einsum("sr,sij->sirj", jnp.eye(2**dims, dtype=dtype), blocks)
    return full.reshape(2**dims * size, 2**dims * size)


def circuit_gates(x: jax.Array, theta: jax.Array, phi: jax.Array, *, qubits: int, basis: str = "fourier",
                  dtype: jnp.dtype = jnp.complex64) -> list[jax.Array]:
    """The circuit's blocks in the order they act, as dense matrices on the whole register (index qubits, plus
    one ancilla per dimension first in "chebyshev"); x [dims] (angles in "fourier", t ∈ [−1, 1] in
    "chebyshev"), theta [n − 1], phi [n]."""
    check_choice("basis", basis, ("fourier", "chebyshev"))
    check_int("qubits", qubits)
    if x.ndim != 1 or x.shape[0] < 1:
        raise ValueError(f"x must be one input of shape [dims] with dims >= 1, got shape {list(x.shape)}")
    dims = x.shape[0]
    total = qubits * dims + (dims if basis == "chebyshev" else 0)
    if total > MAX_SIMULATED_QUBITS:
        raise ValueError(f"the simulated register must have at most {MAX_SIMULATED_QUBITS} qubits, got {total} "
                         f"({qubits} qubits x {dims} dims{' + one ancilla per dim' if basis == 'chebyshev' else ''})")
    if theta.shape != (2 ** (qubits * dims) - 1,) or phi.shape != (2 ** (qubits * dims),):
        raise ValueError(f"theta and phi must have shapes [{2 ** (qubits * dims) - 1}] and [{2 ** (qubits * dims)}] "
                         f"for {qubits} qubits x {dims} dims, got {list(theta.shape)} and {list(phi.shape)}")
    prep = prep_unitary(theta, dtype)
    if basis == "fourier":
        return [prep, select_unitary(x, qubits, signed=True, dtype=dtype), phase_unitary(phi, dtype), prep.conj().T]
    walsh = hadamard(dtype)
    for _ in range(dims - 1):
        walsh = jnp.kron(walsh, hadamard(dtype))
    spread = jnp.kron(walsh, jnp.eye(prep.shape[0], dtype=dtype))
    return [spread, _on_index(prep, dims), _sign_controlled_select(jnp.arccos(x), qubits, dtype),
            _on_index(phase_unitary(phi, dtype), dims), _on_index(prep.conj().T, dims), spread]


def apply(gates: list[jax.Array], state: jax.Array) -> jax.Array:
    """The state [2^Q] after the gates, in order (the state-vector simulation itself)."""
    for gate in gates:
        state = gate @ state
    return state


@functools.partial(jax.jit, static_argnames=("qubits", "basis", "dtype"))
def circuit_amplitude(x: jax.Array, theta: jax.Array, phi: jax.Array, *, qubits: int, basis: str = "fourier",
                      dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """a(x) = ⟨0|U(x; θ, φ)|0⟩, simulated: |0…0⟩ through every gate, then its |0…0⟩ amplitude (a scalar).
    Compiled once per register (the gates are hundreds of small ops, slow one by one)."""
    gates = circuit_gates(x, theta, phi, qubits=qubits, basis=basis, dtype=dtype)
    start = jnp.zeros(gates[0].shape[0], dtype).at[0].set(1)
    return apply(gates, start)[0]


@functools.partial(jax.jit, static_argnames=("qubits", "basis", "dtype"))
def circuit_unitary(x: jax.Array, theta: jax.Array, phi: jax.Array, *, qubits: int, basis: str = "fourier",
                    dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """U(x; θ, φ) [2^Q, 2^Q] on the whole register (ancillas included): the product of `circuit_gates`."""
    gates = circuit_gates(x, theta, phi, qubits=qubits, basis=basis, dtype=dtype)
    unitary = gates[0]
    for gate in gates[1:]:
        unitary = gate @ unitary
    return unitary


def readout_probability(x: jax.Array, theta: jax.Array, phi: jax.Array, *, qubits: int, basis: str = "fourier",
                        dtype: jnp.dtype = jnp.complex64) -> jax.Array:
    """⟨0|U† O U|0⟩ with O = |0⟩⟨0|: the probability of measuring all zeros; the modulus readout is its root."""
    return jnp.abs(circuit_amplitude(x, theta, phi, qubits=qubits, basis=basis, dtype=dtype)) ** 2


@jax.jit
def hadamard_test(unitary: jax.Array) -> jax.Array:
    """⟨Z⟩ of an ancilla after H, controlled-U, H on |0⟩|0…0⟩, simulated; equals Re⟨0|U|0⟩ (the signed readout)."""
    size = unitary.shape[0]
    eye = jnp.eye(size, dtype=unitary.dtype)
    controlled = jnp.zeros((2 * size, 2 * size), unitary.dtype).at[:size, :size].set(eye)
    controlled = controlled.at[size:, size:].set(unitary)
    spread = jnp.kron(hadamard(unitary.dtype), eye)
    state = apply([spread, controlled, spread], jnp.zeros(2 * size, unitary.dtype).at[0].set(1))
    return jnp.sum(jnp.abs(state[:size]) ** 2) - jnp.sum(jnp.abs(state[size:]) ** 2)
