"""SAQNN, the constructive quantum neural network of "SAQNN: Spectral Adaptive Quantum Neural Network as a
Universal Approximator" (Tang, Zhang, Sun; arXiv 2602.09718), in the closed form a classical simulation trains.

No code of the paper is public; the circuit is the zoo's RECONSTRUCTION of the blocks the paper's summary names
(`icml26zoo.quantum.circuit` simulates it gate by gate). Its amplitude of returning to |0⟩ is

    a(x) = ⟨0| PREP(θ)† PHASE(φ) SELECT(x) PREP(θ) |0⟩ = Σ_k p_k(θ) e^{iφ_k} B_k(x),

with p(θ) the tree probabilities of the multiplexed-R_y state preparation (n − 1 angles θ), φ the n injected
phases, and B_k the basis function of index state |k⟩ (`icml26zoo.quantum.registers`): e^{i k·x} for the
"fourier" basis (k two's complement, x ∈ [−π, π]^d) or Π_i T_{k_i}(t_i) for "chebyshev" (t ∈ [−1, 1]^d). The
coefficient vector c_k = p_k e^{iφ_k} ranges over every complex vector of ℓ₁ norm 1, which is where the
approximation rate of a truncated Fourier / Chebyshev series comes from. Readouts:

- "modulus": f(x) = ⟨0|U†|0⟩⟨0|U|0⟩^{1/2} = |a(x)| ∈ [0, 1] (the paper's observable O = |0⟩⟨0|);
- "hadamard": f(x) = Re a(x) ∈ [−1, 1], what a Hadamard test on an ancilla estimates (signed targets).

`classical=True` adds a trained scale s and offset c (output s·f + c), so targets need not have ℓ₁-normalised
coefficients. The closed form costs O(B · n · d) for a batch of B inputs and runs in the inputs' precision
(float32 inputs: complex64; float64 under x64: complex128). Shot noise is not modelled.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.quantum.registers import check_register, frequencies, tree_probabilities
from icml26zoo.validation import check_bool, check_choice, check_float_array

__all__ = ["READOUTS", "SAQNN", "amplitude", "amplitude_from_basis", "basis_matrix", "coefficients", "readout"]

READOUTS = ("modulus", "hadamard")


def _complex_dtype(x: jax.Array):
    return jnp.complex128 if x.dtype == jnp.float64 else jnp.complex64


def basis_matrix(x: jax.Array, *, qubits: int, basis: str = "fourier") -> jax.Array:
    """B [B, n]: every basis function at every input x [B, d] (complex; real-valued in "chebyshev").

    Per dimension the N = 2^qubits one-dimensional functions are evaluated once ([B, N]) and the n = N^d
    products gathered by the register's multi-indices."""
    check_float_array("x", x, (None, None), "[B, d]")
    x = jnp.asarray(x)
    dims = x.shape[1]
    check_register(qubits, dims, basis)
    index = frequencies(qubits, dims, basis)  # [n, d]
    size = 2**qubits
    dtype = _complex_dtype(x)
    if basis == "fourier":
        k = np.concatenate([np.arange(size // 2), np.arange(-size // 2, 0)])  # value of unsigned u
        values = jnp.exp(1j * (x[..., None] * jnp.asarray(k, x.dtype)).astype(dtype))  # [B, d, N]
        unsigned = np.where(index < 0, index + size, index)
    else:
        values = jnp.cos(jnp.arccos(x)[..., None] * jnp.arange(size, dtype=x.dtype)).astype(dtype)
        unsigned = index
    product = values[:, 0, unsigned[:, 0]]
    for i in range(1, dims):
        product = product * values[:, i, unsigned[:, i]]
    return product


def coefficients(theta: jax.Array, phi: jax.Array) -> jax.Array:
    """c [n] = p(θ) e^{iφ}: the series' coefficients, Σ|c_k| = 1."""
    dtype = jnp.complex128 if phi.dtype == jnp.float64 else jnp.complex64
    return tree_probabilities(theta).astype(dtype) * jnp.exp(1j * phi.astype(dtype))


def amplitude_from_basis(basis: jax.Array, theta: jax.Array, phi: jax.Array) -> jax.Array:
    """a [B] = basis [B, n] @ c(θ, φ) (training precomputes `basis_matrix` once for a fixed set of inputs)."""
    return basis @ coefficients(theta, phi).astype(basis.dtype)


@functools.partial(jax.jit, static_argnames=("qubits", "basis"))
def amplitude(x: jax.Array, theta: jax.Array, phi: jax.Array, *, qubits: int, basis: str = "fourier") -> jax.Array:
    """a(x) [B] = ⟨0|U(x; θ, φ)|0⟩ in closed form for x [B, d], theta [n − 1], phi [n]."""
    return amplitude_from_basis(basis_matrix(x, qubits=qubits, basis=basis), theta, phi)


def readout(a: jax.Array, kind: str = "modulus") -> jax.Array:
    """The measured output from the amplitude a [B]: |a| ("modulus") or Re a ("hadamard"), real [B]."""
    check_choice("readout", kind, READOUTS)
    return jnp.abs(a) if kind == "modulus" else jnp.real(a)


class SAQNN(nnx.Module):
    """The SAQNN regressor: x [B, dims] -> f(x) [B] (module docstring).

    Args:
      qubits: index qubits per input dimension (>= 1); N = 2^qubits basis functions per dimension and
        n = N^dims in all.
      dims: input dimensions d (>= 1).
      basis: "fourier" (inputs are angles, f is 2π-periodic) or "chebyshev" (inputs t ∈ [−1, 1]; outside it
        arccos is undefined and the output is NaN).
      readout: "modulus" (|a|, the paper's readout) or "hadamard" (Re a).
      classical: add a trained scale and offset (output scale · f + offset; init 1 and 0).
      rngs: draws θ = π/2 + 0.1·N(0, 1) (near the uniform state p_k = 1/n) and φ ~ U(−π, π).

    Parameters: theta [n − 1] and phi [n] (2n − 1 quantum parameters), plus scale and offset when `classical`.
    """

    def __init__(self, qubits: int, dims: int, *, basis: str = "fourier", readout: str = "modulus",
                 classical: bool = True, rngs: nnx.Rngs) -> None:
        n = check_register(qubits, dims, basis)
        check_choice("readout", readout, READOUTS)
        check_bool("classical", classical)
        self.qubits, self.dims, self.basis, self.readout, self.classical = qubits, dims, basis, readout, classical
        self.theta = nnx.Param(math.pi / 2 + 0.1 * jax.random.normal(rngs.params(), (n - 1,)))
        self.phi = nnx.Param(jax.random.uniform(rngs.params(), (n,), minval=-math.pi, maxval=math.pi))
        if classical:
            self.scale = nnx.Param(jnp.ones(()))
            self.offset = nnx.Param(jnp.zeros(()))

    @property
    def num_basis(self) -> int:
        """n = 2^(qubits · dims)."""
        return 2 ** (self.qubits * self.dims)

    @property
    def num_quantum_parameters(self) -> int:
        """2n − 1: the n − 1 tree angles and the n phases."""
        return 2 * self.num_basis - 1

    def basis_matrix(self, x: jax.Array) -> jax.Array:
        """B [B, n] at inputs x [B, dims] (ValueError for another shape)."""
        check_float_array("x", x, (None, self.dims), "[B, d]")
        return basis_matrix(x, qubits=self.qubits, basis=self.basis)

    def from_basis(self, basis: jax.Array) -> jax.Array:
        """f [B] from a precomputed basis matrix [B, n] (the training loop's fast path)."""
        out = readout(amplitude_from_basis(basis, self.theta[...], self.phi[...]), self.readout)
        return self.scale[...] * out + self.offset[...] if self.classical else out

    def __call__(self, x: jax.Array) -> jax.Array:
        """f(x) [B] for x [B, dims]."""
        return self.from_basis(self.basis_matrix(x))
