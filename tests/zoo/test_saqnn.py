"""SAQNN (icml26zoo.quantum): the gate-level state-vector simulation equals the closed form that training uses
(1e-10 in complex128, 1e-5 in complex64), state preparation gives the tree probabilities, every gate is unitary,
the modulus readout lies in [0, 1] and is 2π-periodic in the Fourier basis, a single Chebyshev index gives |T_k|,
the Hadamard-test readout is Re a, the parameter count is 2n − 1, and bad input raises ValueError naming it."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo import quantum as qn

# Registers of at most 4 index qubits (plus the Chebyshev ancillas): (basis, qubits per dim, dims).
REGISTERS = [("fourier", 3, 1), ("fourier", 2, 2), ("fourier", 1, 3), ("chebyshev", 2, 1), ("chebyshev", 2, 2)]

# Compiles dominate these tiny programs; every comparison here is within a tolerance, none bit-exact.
pytestmark = pytest.mark.usefixtures("fast_compile")


def random_parameters(qubits, dims, seed=0):
    """θ, φ spread over several turns (signed amplitudes included), float64 NumPy."""
    rng = np.random.default_rng(seed)
    n = 2 ** (qubits * dims)
    return rng.uniform(-2 * math.pi, 2 * math.pi, n - 1), rng.uniform(-2 * math.pi, 2 * math.pi, n)


def random_inputs(basis, dims, count=3, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(-math.pi, math.pi, (count, dims)) if basis == "fourier" else rng.uniform(-1, 1, (count, dims))


def simulated(x, theta, phi, qubits, basis):
    """⟨0|U|0⟩ of each input row by the state-vector simulation in complex128 ([B] NumPy)."""
    with jax.enable_x64(True):
        return np.array([complex(qn.circuit_amplitude(jnp.asarray(row), jnp.asarray(theta), jnp.asarray(phi),
                                                      qubits=qubits, basis=basis, dtype=jnp.complex128))
                         for row in x])


def max_unitarity_error(matrix):
    matrix = np.asarray(matrix)
    return float(np.max(np.abs(matrix.conj().T @ matrix - np.eye(matrix.shape[0]))))


@pytest.mark.parametrize(("basis", "qubits", "dims"), REGISTERS)
def test_state_vector_simulation_equals_the_closed_form(basis, qubits, dims):
    theta, phi = random_parameters(qubits, dims)
    x = random_inputs(basis, dims)
    want = simulated(x, theta, phi, qubits, basis)
    with jax.enable_x64(True):
        exact = qn.amplitude(jnp.asarray(x), jnp.asarray(theta), jnp.asarray(phi), qubits=qubits, basis=basis)
        assert exact.dtype == jnp.complex128
        np.testing.assert_allclose(np.asarray(exact), want, rtol=0, atol=1e-10)
    single = qn.amplitude(jnp.asarray(x, jnp.float32), jnp.asarray(theta, jnp.float32),
                          jnp.asarray(phi, jnp.float32), qubits=qubits, basis=basis)
    assert single.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(single), want, rtol=0, atol=1e-5)


def test_known_series_two_complement_fourier_and_hadamard_readout():
    # One qubit per dim: states u = 0, 1 are k = 0, −1. Two qubits: u = 1, 3 are k = +1, −1, so p = ½ on each
    # with φ = 0 gives a(x) = cos x (θ_0 = π/2 splits evenly, both level-1 nodes send everything to bit 1).
    x = np.linspace(-3.0, 3.0, 7)[:, None]
    a = qn.amplitude(jnp.asarray(x, jnp.float32), jnp.array([math.pi / 2, math.pi, math.pi]), jnp.zeros(4),
                     qubits=2)
    np.testing.assert_allclose(np.asarray(a), np.cos(x[:, 0]), atol=1e-6)
    np.testing.assert_array_equal(qn.frequencies(2, 1, "fourier")[:, 0], [0, 1, -2, -1])
    np.testing.assert_array_equal(qn.frequencies(2, 1, "chebyshev")[:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(qn.frequencies(1, 2, "fourier"), [[0, 0], [0, -1], [-1, 0], [-1, -1]])
    # The Hadamard test on the simulated circuit reads Re a(x), which the "hadamard" readout returns.
    theta, phi = random_parameters(1, 2, seed=3)
    for basis in ("fourier", "chebyshev"):
        point = random_inputs(basis, 2, count=1, seed=4)
        with jax.enable_x64(True):
            unitary = qn.circuit_unitary(jnp.asarray(point[0]), jnp.asarray(theta), jnp.asarray(phi), qubits=1,
                                         basis=basis, dtype=jnp.complex128)
            want = float(qn.hadamard_test(unitary))
        model = qn.SAQNN(1, 2, basis=basis, readout="hadamard", classical=False, rngs=nnx.Rngs(0))
        model.theta[...], model.phi[...] = jnp.asarray(theta, jnp.float32), jnp.asarray(phi, jnp.float32)
        assert abs(float(model(jnp.asarray(point, jnp.float32))[0]) - want) < 1e-5
        assert abs(want - simulated(point, theta, phi, 1, basis)[0].real) < 1e-12


def test_state_preparation_is_normalised_with_the_tree_probabilities():
    theta, _ = random_parameters(4, 1, seed=5)
    with jax.enable_x64(True):
        state, probabilities, amplitudes = map(np.asarray, jax.jit(lambda t: (
            qn.prep_unitary(t, jnp.complex128)[:, 0], qn.tree_probabilities(t), qn.tree_amplitudes(t)))(theta))
    assert abs(np.sum(np.abs(state) ** 2) - 1) < 1e-12 and np.max(np.abs(state.imag)) == 0
    np.testing.assert_allclose(np.abs(state) ** 2, probabilities, atol=1e-12)
    np.testing.assert_allclose(state.real, amplitudes, atol=1e-12)
    assert np.all(probabilities >= 0) and np.min(amplitudes) < 0  # angles past π give signed amplitudes
    # The coefficients c = p e^{iφ} have ℓ1 norm 1 (the model's normalisation).
    c = qn.coefficients(jnp.asarray(theta, jnp.float32), jnp.ones(16))
    assert abs(float(jnp.sum(jnp.abs(c))) - 1) < 1e-5


def test_every_gate_is_unitary_and_phase_injection_is_exact():
    theta, phi = random_parameters(2, 2, seed=6)
    inputs = {basis: random_inputs(basis, 2, count=1)[0] for basis in ("fourier", "chebyshev")}

    @jax.jit
    def every_gate(angle, theta, phi, inputs):
        gates = [qn.ry(angle, jnp.complex128), qn.rz(angle, jnp.complex128), qn.phase(angle, jnp.complex128),
                 qn.hadamard(jnp.complex128), qn.single_qubit(qn.ry(angle, jnp.complex128), 1, 3),
                 qn.uniformly_controlled(qn.ry(theta[:4], jnp.complex128), 3)]
        for basis, x in inputs.items():
            gates += qn.circuit_gates(x, theta, phi, qubits=2, basis=basis, dtype=jnp.complex128)
        return gates, qn.phase_unitary(phi, jnp.complex128)

    with jax.enable_x64(True):
        gates, diagonal = every_gate(1.234, theta, phi, inputs)
        assert len(gates) == 16 and max(max_unitarity_error(g) for g in gates) <= 1e-12
        # The R_z cascade and global phase build exactly diag(e^{iφ}).
        np.testing.assert_allclose(np.asarray(diagonal), np.diag(np.exp(1j * phi)), atol=1e-12)


def test_modulus_output_is_in_the_unit_interval_and_periodic():
    model = qn.SAQNN(2, 2, classical=False, rngs=nnx.Rngs(1))
    x = jnp.asarray(random_inputs("fourier", 2, count=64, seed=7), jnp.float32)
    f = model(x)
    assert f.shape == (64,) and bool(jnp.all(f >= 0)) and bool(jnp.all(f <= 1 + 1e-6))
    for shift in ([2 * math.pi, 0.0], [0.0, -2 * math.pi]):
        np.testing.assert_allclose(np.asarray(model(x + jnp.asarray(shift))), np.asarray(f), atol=1e-5)
    # With the classical scale and offset the output is s·f + c.
    scaled = qn.SAQNN(2, 2, rngs=nnx.Rngs(1))
    scaled.scale[...], scaled.offset[...] = jnp.asarray(2.0), jnp.asarray(-0.5)
    np.testing.assert_allclose(np.asarray(scaled(x)), 2 * np.asarray(f) - 0.5, atol=1e-5)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_single_chebyshev_index_gives_the_modulus_of_t_k(k):
    # θ sends all of the tree's mass to leaf k (π where the path takes bit 1, 0 where it takes bit 0).
    theta = np.zeros(3)
    theta[0] = math.pi * (k >> 1)
    theta[1 + (k >> 1)] = math.pi * (k & 1)
    model = qn.SAQNN(2, 1, basis="chebyshev", classical=False, rngs=nnx.Rngs(0))
    model.theta[...] = jnp.asarray(theta, jnp.float32)
    t = np.linspace(-1.0, 1.0, 41)
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(t[:, None], jnp.float32))),
                               np.abs(np.polynomial.chebyshev.Chebyshev.basis(k)(t)), atol=1e-5)


@pytest.mark.parametrize(("qubits", "dims", "classical"), [(1, 1, False), (2, 2, True), (1, 3, True)])
def test_parameter_count_is_two_n_minus_one(qubits, dims, classical):
    model = qn.SAQNN(qubits, dims, classical=classical, rngs=nnx.Rngs(0))
    n = 2 ** (qubits * dims)
    count = sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert model.num_quantum_parameters == 2 * n - 1
    assert count == 2 * n - 1 + (2 if classical else 0)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: qn.SAQNN(0, 2, rngs=nnx.Rngs(0)), r"qubits must be an integer in \[1, 24\], got 0"),
    (lambda: qn.SAQNN(2, 0, rngs=nnx.Rngs(0)), r"dims must be an integer in \[1, 24\], got 0"),
    (lambda: qn.SAQNN(13, 2, rngs=nnx.Rngs(0)), r"qubits \* dims must be at most 24"),
    (lambda: qn.SAQNN(2, 2, basis="legendre", rngs=nnx.Rngs(0)), r"basis must be one of .*'fourier'.*'legendre'"),
    (lambda: qn.SAQNN(2, 2, readout="probability", rngs=nnx.Rngs(0)), r"readout must be one of"),
    (lambda: qn.SAQNN(1, 2, rngs=nnx.Rngs(0))(jnp.zeros((4, 3))), r"x must .*\[B, d\].*\(4, 3\)|x must .*\[4, 3\]"),
    (lambda: qn.SAQNN(1, 2, rngs=nnx.Rngs(0))(jnp.zeros(4)), r"x must "),
    (lambda: qn.tree_probabilities(jnp.zeros(4)), r"theta must hold 2\^Q − 1 angles .*got 4"),
    (lambda: qn.circuit_amplitude(jnp.zeros(2), jnp.zeros(2), jnp.zeros(4), qubits=1),
     r"theta and phi must have shapes \[3\] and \[4\]"),
    (lambda: qn.circuit_amplitude(jnp.zeros(1), jnp.zeros(2**13 - 1), jnp.zeros(2**13), qubits=13),
     r"at most 12 qubits, got 13"),
    (lambda: qn.frequencies(0, 1), r"qubits must be an integer in \[1, 24\], got 0"),
])
def test_bad_input_names_the_argument(make, message):
    with pytest.raises(ValueError, match=message):
        make()
