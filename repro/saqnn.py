"""SAQNN ("Spectral Adaptive Quantum Neural Network as a Universal Approximator", ICML 2026): test error of the
simulated constructive QNN against the number of basis functions n, beside classical fits of the same size.

For each target (Franke's function, two Gaussians, and the Sobolev sweep (|x|/√2)^s at s = 0.5 and 1.5;
`repro/saqnn_parts.py`), basis ("fourier" on [−π, π]²,
"chebyshev" on [−1, 1]²) and register size `qubits` per dimension (n = 4^qubits basis functions in 2-D), each
seed draws `batch_size` uniform training points and fits:

- `saqnn_modulus`: the zoo's SAQNN (`icml26zoo.quantum.SAQNN`, a reconstruction) with the paper's readout
  |⟨0|U|0⟩| and a classical scale and offset (2n + 1 parameters), full-batch Adam at lr 1e-2 for `steps` steps;
- `saqnn_hadamard`: the same circuit read by a Hadamard test, Re⟨0|U|0⟩ (a signed output);
- `lstsq`: least squares over the same n basis functions (the truncated series the circuit's coefficients can
  express, found exactly);
- `mlp`: a tanh MLP 2 → n/2 → 1 (2n + 1 parameters), the same Adam schedule.

The score is the RMSE on the seq_len × seq_len midpoint grid of the domain (the test set; no noise on the
targets) and the final training RMSE; rows give mean ± spread (max − min) over seeds. The shared trainer is not
used: it trains sequence models on token batches, and this is full-batch regression on a precomputed basis
matrix, a few-line optax loop compiled as one `lax.scan`. Nothing is checkpointed, so `resume` only requires
`run_dir` to exist and the run is recomputed. `Budget` fields: steps = Adam steps, batch_size = training points,
seq_len = test-grid side, seeds = seeds.

    from icml26zoo import repro
    results = repro.run("saqnn", "runs/saqnn", budget="quick")

From a shell: `python -m icml26zoo.repro saqnn [--smoke | --quick] --out DIR
[targets=franke,gaussians,abs_s0.5,abs_s1.5] [bases=fourier,chebyshev]
[methods=saqnn_modulus,saqnn_hadamard,lstsq,mlp] [qubits=2,3,4] [learning_rate=0.01]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.quantum import BASES
from icml26zoo.repro import saqnn_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_and_spread
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_positive

__all__ = ["FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=3000, batch_size=2048, seq_len=64, seeds=(0, 1, 2))
QUICK = Budget(steps=1000, batch_size=1024, seq_len=32, seeds=(0, 1, 2))
# One target, both bases, n = 4, every method: 20 Adam steps on 64 points, an 8 × 8 test grid, one seed.
SMOKE = Budget(steps=20, batch_size=64, seq_len=8, seeds=(0,))
SMOKE_ARGS = {"targets": ("gaussians",), "qubits": (1,)}
COLUMNS = ("target", "basis", "n", "method", "params", "test_rmse", "train_rmse")


def _parameters(method: str, n: int) -> int:
    """Trained real parameters: SAQNN 2n − 1 + 2 (scale, offset), the MLP 4·(n/2) + 1, least squares n real
    coefficients (the real and imaginary parts of a Fourier fit span n distinct real functions)."""
    return n if method == "lstsq" else 2 * n + 1


def _cell(target: str, basis: str, qubits: int, method: str, seed: int, *, budget: Budget,
          learning_rate: float) -> dict[str, float]:
    """test_rmse and train_rmse of one fit."""
    rng = np.random.default_rng(seed)
    train_u = rng.uniform(size=(budget.batch_size, 2))
    train_y = parts.target(target, train_u)
    test_u = parts.test_grid(budget.seq_len)
    if method == "lstsq":
        predictions, train_mse = parts.fit_lstsq(train_u, train_y, test_u, qubits=qubits, basis=basis)
    elif method == "mlp":
        predictions, train_mse = parts.fit_mlp(train_u, train_y, test_u, width=4**qubits // 2, basis=basis,
                                               seed=seed, steps=budget.steps, lr=learning_rate)
    else:
        predictions, train_mse = parts.fit_saqnn(train_u, train_y, test_u, qubits=qubits, basis=basis,
                                                 readout=method.removeprefix("saqnn_"), seed=seed,
                                                 steps=budget.steps, lr=learning_rate)
    error = predictions - parts.target(target, test_u)
    return {"test_rmse": float(np.sqrt(np.mean(error**2))), "train_rmse": float(np.sqrt(train_mse))}


def _text(values: list[float]) -> str:
    mean, width = mean_and_spread(values, digits=6)
    return f"{mean:.4g}" if width is None else f"{mean:.4g} ± {width:.2g}"


def error_figure(per_seed: dict[tuple, list[dict[str, float]]], targets, bases, methods, qubits) -> Figure:
    """Test RMSE (mean over seeds, error bars: min to max) against n, one panel per (target, basis)."""
    figure = Figure(figsize=(4 * len(bases), 3.3 * len(targets)), layout="constrained")
    panels = np.atleast_2d(figure.subplots(len(targets), len(bases), squeeze=False))
    sizes = [4**q for q in qubits]
    for row, target in enumerate(targets):
        for col, basis in enumerate(bases):
            panel = panels[row, col]
            for method in methods:
                runs = [[s["test_rmse"] for s in per_seed[(target, basis, 4**q, method)]] for q in qubits]
                mean = np.array([np.mean(r) for r in runs])
                low, high = mean - np.array([np.min(r) for r in runs]), np.array([np.max(r) for r in runs]) - mean
                panel.errorbar(sizes, mean, yerr=[low, high], marker="o", capsize=3, label=method)
            panel.set(xscale="log", yscale="log", xlabel="basis functions n", ylabel="test RMSE",
                      title=f"{target}, {basis}")
            panel.set_xticks(sizes, [str(n) for n in sizes])
            panel.set_xticks([], minor=True)  # the log axis's minor labels would overprint n
            panel.grid(True, alpha=0.3)
            panel.legend(fontsize=7)
    return figure


@register_experiment("saqnn", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/saqnn.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, targets: tuple[str, ...] = parts.TARGETS,
        bases: tuple[str, ...] = BASES, methods: tuple[str, ...] = parts.METHODS, qubits: tuple[int, ...] = (2, 3, 4),
        learning_rate: float = 1e-2, resume: bool = False) -> Results:
    """Fits every (target, basis, n, method) once per seed; writes results.md/json and the figure `errors`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      targets: a subset of ("franke", "gaussians", "abs_s0.5", "abs_s1.5").
      bases: a subset of ("fourier", "chebyshev").
      methods: a subset of ("saqnn_modulus", "saqnn_hadamard", "lstsq", "mlp").
      qubits: qubits per input dimension, each in [1, 6] (n = 4^qubits basis functions).
      learning_rate: Adam's step size for the SAQNN and the MLP.
      resume: require `run_dir` to exist (everything is recomputed).
    """
    targets = check_names("targets", targets, parts.TARGETS)
    bases = check_names("bases", bases, BASES)
    methods = check_names("methods", methods, parts.METHODS)
    if not qubits or len(set(qubits)) != len(qubits):
        raise ValueError(f"qubits must name at least one register size, without repeats, got {qubits!r}")
    for size in qubits:
        check_int("qubits[i]", size, minimum=1, maximum=6)
    check_positive("learning_rate", learning_rate, finite=True)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed: dict[tuple, list[dict[str, float]]] = {}
    for target in targets:
        for basis in bases:
            for size in qubits:
                for method in methods:
                    per_seed[(target, basis, 4**size, method)] = [
                        _cell(target, basis, size, method, seed, budget=budget, learning_rate=learning_rate)
                        for seed in budget.seeds]
    rows = [{"target": t, "basis": b, "n": n, "method": m, "params": _parameters(m, n),
             "test_rmse": _text([s["test_rmse"] for s in scores]),
             "train_rmse": _text([s["train_rmse"] for s in scores])} for (t, b, n, m), scores in per_seed.items()]
    notes = [
        f"Targets on the unit square read through each basis's domain (fourier: [−π, π]², chebyshev: [−1, 1]²): "
        f"franke = Franke's function min-max scaled into [0, 1]; gaussians = 0.6 N((0.35, 0.4), 0.1²) + "
        f"0.4 N((0.68, 0.65), 0.12²) (unnormalised bumps); abs_sS = (|x| / √2)^S with x = 2u − 1 (the Sobolev "
        f"sweep: in H^t only for t < S + 1). {budget.batch_size} uniform training points per seed, "
        f"test RMSE on the {budget.seq_len}² midpoint grid, {budget.steps} full-batch Adam steps at lr "
        f"{learning_rate:g}. n = 4^qubits basis functions. Mean ± spread (max − min) over seeds {budget.seeds}. "
        "SAQNN is the zoo's reconstruction of the circuit (no official code), simulated in closed form "
        "(complex64), with a classical scale and offset; no shot noise.",
    ]
    return experiment.write(
        rows, columns=COLUMNS, title="SAQNN: test error against the number of basis functions n",
        notes=notes, figures={"errors": error_figure(per_seed, targets, bases, methods, qubits)},
        extra={"per_seed": {" ".join(map(str, key)): s for key, s in per_seed.items()},
               "learning_rate": learning_rate, "qubits": list(qubits)})
