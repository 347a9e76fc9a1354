"""The targets, data and fits of the SAQNN reproduction (repro/saqnn.py).

Targets live on the unit square u ∈ [0, 1]² and are read through each basis's domain: x ∈ [−π, π]² for the
Fourier basis (u = (x + π) / 2π) and t ∈ [−1, 1]² for Chebyshev (u = (t + 1) / 2).

- franke: Franke's function, min-max scaled into [0, 1] (smooth, not periodic on the square);
- gaussians: two Gaussian bumps inside the square (smooth and, to within 1e-2 at the edges, periodic);
- abs_s0.5, abs_s1.5: the Sobolev-regularity sweep (|x| / √2)^s with x = 2u − 1, a point singularity at the
  centre: in H^t of the square for t < s + 1 only, so an n-term series can approach it at best as n^{−(s+1)/2}
  in L₂ (d = 2).

Fits, each at n = 2^(2q) basis functions:

- saqnn_modulus: the zoo's SAQNN with the paper's readout |a(x)| (and a classical scale and offset), full-batch
  Adam on the training points; saqnn_hadamard: the same with the Hadamard-test readout Re a(x);
- lstsq: the least-squares series in the same n basis functions (real part of Σ c_k B_k), the classical
  truncated-series fit the SAQNN coefficients could at best match;
- mlp: a one-hidden-layer tanh MLP of width n / 2 (2n + 1 parameters, as SAQNN's 2n − 1 + 2), the same Adam.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from icml26zoo.optim.hparams import with_standard_promotion
from icml26zoo.quantum import SAQNN, basis_matrix

__all__ = ["METHODS", "SOBOLEV_POWERS", "TARGETS", "domain_inputs", "fit_lstsq", "fit_mlp", "fit_saqnn", "target",
           "test_grid"]

TARGETS = ("franke", "gaussians", "abs_s0.5", "abs_s1.5")
SOBOLEV_POWERS = {"abs_s0.5": 0.5, "abs_s1.5": 1.5}
METHODS = ("saqnn_modulus", "saqnn_hadamard", "lstsq", "mlp")


def _franke_raw(u: np.ndarray) -> np.ndarray:
    x, y = 9 * u[..., 0], 9 * u[..., 1]
    return (0.75 * np.exp(-((x - 2) ** 2 + (y - 2) ** 2) / 4) + 0.75 * np.exp(-((x + 1) ** 2) / 49 - (y + 1) / 10)
            + 0.5 * np.exp(-((x - 7) ** 2 + (y - 3) ** 2) / 4) - 0.2 * np.exp(-((x - 4) ** 2) - (y - 7) ** 2))


@functools.cache
def _franke_range() -> tuple[float, float]:
    """(min, max) of Franke's function on a 1001² grid of the unit square."""
    side = np.linspace(0.0, 1.0, 1001)
    values = _franke_raw(np.stack(np.meshgrid(side, side, indexing="ij"), -1))
    return float(values.min()), float(values.max())


def _gaussians(u: np.ndarray) -> np.ndarray:
    first = np.exp(-np.sum((u - np.array([0.35, 0.4])) ** 2, -1) / (2 * 0.1**2))
    second = np.exp(-np.sum((u - np.array([0.68, 0.65])) ** 2, -1) / (2 * 0.12**2))
    return 0.6 * first + 0.4 * second


def target(name: str, u: np.ndarray) -> np.ndarray:
    """The target [B] at points u [B, 2] of the unit square, in [0, 1]."""
    if name == "franke":
        low, high = _franke_range()
        return (_franke_raw(u) - low) / (high - low)
    if name in SOBOLEV_POWERS:
        return (np.linalg.norm(2 * u - 1, axis=-1) / math.sqrt(2)) ** SOBOLEV_POWERS[name]
    return _gaussians(u)


def domain_inputs(u: np.ndarray, basis: str) -> np.ndarray:
    """The model's inputs for unit-square points u: angles in [−π, π] (fourier) or t ∈ [−1, 1] (chebyshev)."""
    return (2 * u - 1) * (math.pi if basis == "fourier" else 1.0)


def test_grid(side: int) -> np.ndarray:
    """The side² cell midpoints of the unit square: [side², 2]."""
    mid = (np.arange(side) + 0.5) / side
    return np.stack(np.meshgrid(mid, mid, indexing="ij"), -1).reshape(-1, 2)


def _adam_scan(loss_fn, params, *, steps: int, lr: float):
    """Full-batch Adam for `steps` steps inside one compiled scan; (params, losses [steps])."""
    optimizer = with_standard_promotion(optax.adam(lr))  # optax's bias correction mixes float and int32

    def step(carry, _):
        params, state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = optimizer.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), loss

    (params, _), losses = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
    return params, losses


@functools.partial(jax.jit, static_argnames=("graphdef", "steps", "lr"))
def _train_saqnn(graphdef, params, basis, y, *, steps: int, lr: float):
    def loss_fn(p):
        return jnp.mean((nnx.merge(graphdef, p).from_basis(basis) - y) ** 2)

    return _adam_scan(loss_fn, params, steps=steps, lr=lr)


def fit_saqnn(train_u: np.ndarray, train_y: np.ndarray, test_u: np.ndarray, *, qubits: int, basis: str,
              readout: str, seed: int, steps: int, lr: float) -> tuple[np.ndarray, float]:
    """Test predictions [T] and final training MSE of a SAQNN (qubits per dimension, 2 dims, the module's
    initialisation from `seed`, classical scale and offset) trained by full-batch Adam."""
    model = SAQNN(qubits, 2, basis=basis, readout=readout, rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    train_basis = basis_matrix(jnp.asarray(domain_inputs(train_u, basis), jnp.float32), qubits=qubits, basis=basis)
    params, losses = _train_saqnn(graphdef, params, train_basis, jnp.asarray(train_y, jnp.float32),
                                  steps=steps, lr=lr)
    trained = nnx.merge(graphdef, params)
    predictions = trained(jnp.asarray(domain_inputs(test_u, basis), jnp.float32))
    return np.asarray(predictions), float(losses[-1])


def fit_lstsq(train_u: np.ndarray, train_y: np.ndarray, test_u: np.ndarray, *, qubits: int,
              basis: str) -> tuple[np.ndarray, float]:
    """Test predictions and training MSE of the least-squares series Re Σ c_k B_k over the same n functions
    (float64 NumPy; minimum-norm solution, since cos/sin pairs of ±k span the same functions)."""
    def features(u):
        b = np.asarray(basis_matrix(jnp.asarray(domain_inputs(u, basis), jnp.float32), qubits=qubits, basis=basis))
        return np.concatenate([b.real, -b.imag], 1) if basis == "fourier" else b.real

    train_f = features(train_u).astype(np.float64)
    coef = np.linalg.lstsq(train_f, train_y, rcond=None)[0]
    train_mse = float(np.mean((train_f @ coef - train_y) ** 2))
    return features(test_u).astype(np.float64) @ coef, train_mse


def _mlp(params, x):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


@functools.partial(jax.jit, static_argnames=("steps", "lr"))
def _train_mlp(params, x, y, *, steps: int, lr: float):
    return _adam_scan(lambda p: jnp.mean((_mlp(p, x) - y) ** 2), params, steps=steps, lr=lr)


def fit_mlp(train_u: np.ndarray, train_y: np.ndarray, test_u: np.ndarray, *, width: int, basis: str, seed: int,
            steps: int, lr: float) -> tuple[np.ndarray, float]:
    """Test predictions and training MSE of a tanh MLP 2 → width → 1 (4·width + 1 parameters; LeCun-normal
    weights, zero biases) on the same inputs and Adam schedule."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {"w1": jax.random.normal(k1, (2, width)) / math.sqrt(2), "b1": jnp.zeros(width),
              "w2": jax.random.normal(k2, (width,)) / math.sqrt(width), "b2": jnp.zeros(())}
    x = jnp.asarray(domain_inputs(train_u, basis), jnp.float32)
    params, losses = _train_mlp(params, x, jnp.asarray(train_y, jnp.float32), steps=steps, lr=lr)
    return np.asarray(_mlp(params, jnp.asarray(domain_inputs(test_u, basis), jnp.float32))), float(losses[-1])
