"""The Diag-CFM reproduction's pieces: one cell's training and evaluation, the scores' summaries, the figures."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import statistics
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from icml26zoo.flows import (
    FitConfig,
    SmoothBenchmark,
    fit_velocity,
    predict_labels,
    rms_distance,
    sample_designs,
    zero_deviation,
)

__all__ = ["CellSpec", "abstention_curve", "auroc", "evaluate_cell", "ordering"]

# Out-of-distribution targets sit this many standard deviations out in every label (the training labels are
# standardised, so |y| > 3.5 in every coordinate at once is essentially never seen in training).
OOD_LEVEL = 3.5
COVERAGES = (0.25, 0.5, 0.75, 1.0)


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """One trained flow: the pairing, the benchmark (P, L, design ordering) and the seed."""

    pairing: str
    p: int
    n_labels: int
    order: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.pairing}_P{self.p}_{self.order}_seed{self.seed}"

    def benchmark(self) -> SmoothBenchmark:
        return SmoothBenchmark(self.p, self.n_labels, ordering(self.p, self.order))


def ordering(p: int, order: str) -> tuple[int, ...] | None:
    """The design ordering: "aligned" keeps the label coordinates first (where standard CFM puts the labels),
    "shuffled" is one fixed random permutation of the P coordinates (the same for every seed and method)."""
    if order == "aligned":
        return None
    if order == "shuffled":
        return tuple(int(i) for i in np.random.default_rng(1234 + p).permutation(p))
    raise ValueError(f"order must be 'aligned' or 'shuffled', got {order!r}")


def evaluate_cell(cell: CellSpec, fit: FitConfig, *, train_pairs: int, targets: int, candidates: int,
                  ode_steps: int, cache_dir: pathlib.Path) -> dict:
    """Trains the cell's flow (or reads its stored result) and scores it: per target y*, `candidates` designs
    with their round-trip error RT, Self-Consistency SC and (Diag-CFM) Zero-Deviation ZD, for in-distribution
    targets (labels of held-out designs) and OOD targets (+-OOD_LEVEL in every label)."""
    path = cache_dir / f"{cell.name}.json"
    request = {"cell": dataclasses.asdict(cell), "fit": dataclasses.asdict(fit), "train_pairs": train_pairs,
               "targets": targets, "candidates": candidates, "ode_steps": ode_steps}
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["request"] != request:
            raise ValueError(f"cell {cell.name!r} in {str(cache_dir)!r} was run with other settings; use a new "
                             f"run_dir, or delete {path} to rerun it")
        return stored
    benchmark = cell.benchmark()
    data_key, target_key, ood_key, noise_key = jax.random.split(jax.random.key(cell.seed), 4)
    x, y = benchmark.sample(data_key, train_pairs)
    fitted = fit_velocity(x, y, cell.pairing, fit, seed=cell.seed)
    _, y_in = benchmark.sample(target_key, targets)
    signs = jnp.where(jax.random.bernoulli(ood_key, 0.5, (targets, cell.n_labels)), 1.0, -1.0)
    scores = _scores(fitted, benchmark, cell.pairing, jnp.concatenate([y_in, OOD_LEVEL * signs]), candidates,
                     ode_steps, noise_key)
    record = {"request": request, "curve": fitted.curve,
              "in": {k: v[:targets].tolist() for k, v in scores.items()},
              "ood": {k: v[targets:].tolist() for k, v in scores.items()}}
    cache_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record) + "\n")
    return record


def _scores(fitted, benchmark: SmoothBenchmark, pairing: str, y_target: jax.Array, candidates: int,
            ode_steps: int, key: jax.Array) -> dict[str, np.ndarray]:
    """RT, SC (and ZD for Diag-CFM), each [T, candidates], for targets y_target [T, L]."""
    rows, n_labels = y_target.shape
    repeated = jnp.repeat(y_target, candidates, axis=0)
    eps = jax.random.normal(key, (rows * candidates, benchmark.p))

    @jax.jit
    def score(params, repeated, eps):
        velocity = lambda z, t: fitted.apply(params, z, t)
        x_hat, residual = sample_designs(velocity, repeated, eps, pairing, steps=ode_steps)
        y_hat = predict_labels(velocity, x_hat, n_labels, pairing, steps=ode_steps)
        out = {"rt": rms_distance(benchmark.simulate(x_hat), repeated), "sc": rms_distance(y_hat, repeated)}
        if residual is not None:
            out["zd"] = zero_deviation(residual)
        return out

    out = score(fitted.params, repeated, eps)
    return {k: np.asarray(v).reshape(rows, candidates) for k, v in out.items()}


def auroc(in_scores: np.ndarray, out_scores: np.ndarray) -> float:
    """P(an OOD score > an in-distribution score) + P(tie) / 2: the area under the ROC curve (Mann-Whitney)."""
    a, b = np.asarray(in_scores, np.float64)[:, None], np.asarray(out_scores, np.float64)[None, :]
    return float(np.mean((b > a) + 0.5 * (b == a)))


def best_of(scores: dict, by: str) -> float:
    """Mean RT over targets of the candidate with the lowest `by` score (per target)."""
    rt, chosen = np.asarray(scores["rt"]), np.argmin(np.asarray(scores[by]), axis=1)
    return float(np.mean(rt[np.arange(rt.shape[0]), chosen]))


def abstention_curve(scores: dict, by: str, coverages: Sequence[float] = COVERAGES) -> list[float]:
    """Best-of-N by `by` per target, then keep the fraction `coverage` of targets with the lowest chosen score:
    the mean RT of the kept targets, per coverage."""
    rt, score = np.asarray(scores["rt"]), np.asarray(scores[by])
    chosen = np.argmin(score, axis=1)
    index = np.arange(rt.shape[0])
    chosen_rt, chosen_score = rt[index, chosen], score[index, chosen]
    order = np.argsort(chosen_score, kind="stable")
    return [float(np.mean(chosen_rt[order[: max(1, round(c * len(order)))]])) for c in coverages]


def mean_over(records: list[dict], value: Callable[[dict], float | None]) -> float | None:
    """The mean of value(record) over the records where it is not None (None if there is none)."""
    values = [value(r) for r in records]
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def round_trip_figure(rows: list[dict]) -> Figure:
    """Best-of-N (by SC) and single-candidate round-trip error against P, per pairing and ordering."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    styles = {"Diag-CFM": "tab:blue", "standard CFM": "tab:red"}
    for (pairing, order), group in _groups(rows).items():
        ps = [r["P"] for r in group]
        label = f"{pairing}, {order}"
        dash = "-" if order == "aligned" else "--"
        axes.plot(ps, [r["rt_single"] for r in group], dash, color=styles[pairing], marker="o", alpha=0.4,
                  label=label + " (one sample)")
        axes.plot(ps, [r["rt_best_sc"] for r in group], dash, color=styles[pairing], marker="s",
                  label=label + " (best of N by SC)")
    axes.set(xlabel="design dimension P", ylabel="round-trip error RMS(s(x_hat) - y*)", xscale="log",
             yscale="log", title="Inverse design round trip: Diag-CFM vs standard CFM")
    dims = sorted({r["P"] for r in rows})
    axes.set_xticks(dims, [str(p) for p in dims])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return figure


def abstention_figure(curves: dict[str, list[float]], p: int) -> Figure:
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for label, values in curves.items():
        axes.plot([100 * c for c in COVERAGES], values, marker="o", label=label)
    axes.set(xlabel="coverage (% of targets answered, lowest score first)", ylabel="mean round-trip error",
             title=f"Abstention on in-distribution targets, P = {p}")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _groups(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["pairing"], row["order"]), []).append(row)
    return {k: sorted(v, key=lambda r: r["P"]) for k, v in groups.items()}
