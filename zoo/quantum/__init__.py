"""Quantum neural networks, simulated classically in JAX: SAQNN, the constructive QNN of Tang, Zhang, Sun
(arXiv 2602.09718), as a closed form for training (`saqnn`) and a gate-level state-vector simulation that checks
it (`circuit`); both are the zoo's reconstruction of the circuit (no code of the paper is public)."""

from icml26zoo.quantum.circuit import (
    circuit_amplitude,
    circuit_gates,
    circuit_unitary,
    hadamard_test,
    phase_angles,
    phase_unitary,
    prep_unitary,
    readout_probability,
    select_unitary,
)
from icml26zoo.quantum.gates import hadamard, phase, ry, rz, single_qubit, uniformly_controlled
from icml26zoo.quantum.registers import BASES, check_register, frequencies, tree_amplitudes, tree_probabilities
from icml26zoo.quantum.saqnn import (
    READOUTS,
    SAQNN,
    amplitude,
    amplitude_from_basis,
    basis_matrix,
    coefficients,
    readout,
)

__all__ = ["BASES", "READOUTS", "SAQNN", "amplitude", "amplitude_from_basis", "basis_matrix", "check_register",
           "circuit_amplitude", "circuit_gates", "circuit_unitary", "coefficients", "frequencies", "hadamard",
           "hadamard_test", "phase", "phase_angles", "phase_unitary", "prep_unitary", "readout",
           "readout_probability", "ry", "rz", "select_unitary", "single_qubit", "tree_amplitudes",
           "tree_probabilities", "uniformly_controlled"]
