"""Structured state-space duality (Dao & Gu 2405.21060; Hu et al. 2510.04944): three checks, no training.

1. **Three-way equality.** `kernels.ssd.ssd` run as the recurrent scan (`implementation="reference"`), the
   chunked SSD algorithm (`"xla"`) and the materialised semiseparable attention form (`"attention"`) on one
   random input, scalar (Mamba2) and diagonal decay: their outputs and their pairwise differences.
2. **Rank explosion** (the design notes section 5.4, the note's claim iv). The semiseparable rank (largest numerical
   rank of a lower-triangular block M[t:, :t+1]) of a causal softmax attention matrix against T, next to
   the SSD kernels' (scalar and diagonal decay), which the duality bounds by the state size N. Random
   weights, not a trained model: q, k ~ N(0, 1) of width N (logits q.k/sqrt(N)); SSD decays from the
   Mamba2 init, b, c ~ N(0, 1).
3. **The note's necessary-and-sufficient condition** (claim iii, in the spec's paraphrase): an SSM equals a
   1-SS masked attention exactly when its transition acts as one scalar on the reachable and observable
   state dims. Checked through the implied mask L = M / (C B^T): 1-semiseparable (sigma_2 = 0 in every
   lower block) when the decays agree or differ only on an unreachable or unobservable dim, rank > 1 when a
   reachable and observable dim decays apart.

Nothing is trained, so the shared trainer is not used and `resume` only requires the run directory to
exist (everything is recomputed in seconds). The `Budget` fields name the sizes swept instead:
`steps` = the number of sequence lengths T in the rank sweep (geometric from 8 to `seq_len`), `seq_len` =
the largest T, `batch_size` = the rows of the three-way-equality input, `seeds` = random draws (the rank
table reports the max over seeds, the equality table the max difference over seeds).
"""

from __future__ import annotations

import os

import jax
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.kernels.ssd import CHUNK_SIZES, ssd
from icml26zoo.repro import ssd_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, line_figure, markdown_table
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int

__all__ = ["FORMS", "FULL", "QUICK", "SMOKE", "condition_rows", "equality_rows", "rank_sweep", "run", "sweep_lengths"]

SMOKE = Budget(steps=2, batch_size=1, seq_len=16, seeds=(0,))
QUICK = Budget(steps=4, batch_size=1, seq_len=64, seeds=(0,))
FULL = Budget(steps=7, batch_size=2, seq_len=512, seeds=(0, 1, 2))

# form name -> kernels.ssd implementation
FORMS = {"recurrent": "reference", "chunked": "xla", "attention": "attention"}
PAIRS = (("chunked", "recurrent"), ("attention", "recurrent"), ("chunked", "attention"))
MIN_LENGTH = 8


def _check_args(budget: Budget, state_size: int, chunk_size: int, equality_len: int, rank_rtol: float) -> None:
    check_int("state_size", state_size, minimum=2)
    check_int("equality_len", equality_len, minimum=2)
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size must be one of {CHUNK_SIZES}, got {chunk_size!r}")
    if not isinstance(rank_rtol, float) or not 1e-6 <= rank_rtol < 1:
        raise ValueError(f"rank_rtol must be a float in [1e-6, 1) (below 1e-6 float32 round-off counts as rank), "
                         f"got {rank_rtol!r}")
    if budget.seq_len < MIN_LENGTH:
        raise ValueError(f"budget.seq_len (the largest T of the rank sweep) must be >= {MIN_LENGTH}, "
                         f"got {budget.seq_len}")
    if budget.steps < 2 or budget.steps > budget.seq_len - MIN_LENGTH + 1:
        raise ValueError(f"budget.steps (the number of lengths T in the rank sweep) must lie in "
                         f"[2, {budget.seq_len - MIN_LENGTH + 1}] for seq_len {budget.seq_len}, got {budget.steps}")


def sweep_lengths(budget: Budget) -> list[int]:
    """`budget.steps` distinct lengths, geometric from 8 to `budget.seq_len`."""
    lengths = np.round(np.geomspace(MIN_LENGTH, budget.seq_len, budget.steps)).astype(int)
    for i in range(1, len(lengths)):  # rounding can repeat a short length: step up by one instead
        lengths[i] = max(lengths[i], lengths[i - 1] + 1)
    return [int(t) for t in lengths]


def _forms(inputs: parts.SsdInputs, chunk_size: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """form -> (y [B, T, H, P], final state [B, H, P, N]) as float64 numpy."""
    out = {}
    for form, implementation in FORMS.items():
        y, state = ssd(*inputs, chunk_size=chunk_size, implementation=implementation)
        out[form] = (np.asarray(y, np.float64), np.asarray(state, np.float64))
    return out


def _max_normalized(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(max |want|, 1), the suite's SSD metric (tests/tolerances.py)."""
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1.0))


def equality_rows(budget: Budget, *, state_size: int, chunk_size: int, equality_len: int,
                  head_dim: int = 4, heads: int = 2) -> tuple[list[dict], dict]:
    """Pairwise differences of the three forms, per decay kind, max over seeds; and the seed-0 scalar-decay
    outputs {"inputs", "forms"} for the figure."""
    rows, shown = [], {}
    for diagonal in (False, True):
        worst = {pair: [0.0, 0.0] for pair in PAIRS}
        for seed in budget.seeds:
            inputs = parts.random_ssd_inputs(jax.random.PRNGKey(seed), batch=budget.batch_size, length=equality_len,
                                             heads=heads, head_dim=head_dim, state_size=state_size,
                                             diagonal=diagonal)
            forms = _forms(inputs, chunk_size)
            if not diagonal and not shown:
                shown = {"inputs": inputs, "forms": forms}
            for left, right in PAIRS:
                for i in range(2):
                    worst[(left, right)][i] = max(worst[(left, right)][i],
                                                  _max_normalized(forms[left][i], forms[right][i]))
        for (left, right), (dy, ds) in worst.items():
            rows.append({"decay": "diagonal" if diagonal else "scalar", "forms": f"{left} vs {right}",
                         "max_diff_y": dy, "max_diff_state": ds})
    return rows, shown


def rank_sweep(budget: Budget, *, state_size: int, rank_rtol: float) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Semiseparable rank against T (max over seeds) for softmax, scalar SSD and diagonal SSD; and the
    normalised middle-block spectra at the largest T (seed 0)."""
    rows, spectra = [], {}
    lengths = sweep_lengths(budget)
    for length in lengths:
        ranks = {"softmax": 0, "ssd_scalar": 0, "ssd_diagonal": 0}
        for seed in budget.seeds:
            key = jax.random.PRNGKey(1000 + seed)
            matrices = {"softmax": parts.softmax_matrix(key, length, state_size)}
            for kind, diagonal in (("ssd_scalar", False), ("ssd_diagonal", True)):
                inputs = parts.random_ssd_inputs(key, batch=1, length=length, heads=1, head_dim=1,
                                                 state_size=state_size, diagonal=diagonal)
                matrices[kind] = parts.ssd_matrix(inputs)
            for kind, matrix in matrices.items():
                ranks[kind] = max(ranks[kind], parts.semiseparable_rank(matrix, rank_rtol))
                if length == lengths[-1] and seed == budget.seeds[0]:
                    spectra[kind] = parts.block_spectrum(matrix)
        rows.append({"T": length, **ranks, "bound_N": state_size, "largest_possible": (length + 1) // 2})
    return rows, spectra


def condition_rows(*, length: int, state_size: int, rank_rtol: float, seed: int = 0) -> list[dict]:
    """The implied mask's semiseparable rank and sigma_2/sigma_1 for each case of the note's condition."""
    rows = []
    for name, apart, unreachable, unobservable in parts.CONDITION_CASES:
        matrix, b, c = parts.condition_case(jax.random.PRNGKey(2000 + seed), length=length, state_size=state_size,
                                            apart=apart, unreachable=unreachable, unobservable=unobservable)
        mask = parts.implied_mask(matrix, b, c)
        rank = parts.semiseparable_rank(mask, rank_rtol)
        rows.append({"case": name, "mask_ss_rank": rank, "max_sigma2_over_sigma1": parts.mask_rank_gap(mask),
                     "expected_1SS": not (apart and not unreachable and not unobservable)})
    return rows


def three_way_figure(shown: dict) -> Figure:
    """Output channel 0 of the three forms, their pairwise |differences| per step, and log10 |M| of head 0."""
    figure = Figure(figsize=(13, 3.8), layout="constrained")
    left, middle, right = figure.subplots(1, 3)
    forms = shown["forms"]
    styles = {"recurrent": {"linewidth": 3, "alpha": 0.4}, "chunked": {"linestyle": "--"},
              "attention": {"linestyle": ":", "linewidth": 2}}
    for form, (y, _) in forms.items():
        left.plot(y[0, :, 0, 0], label=form, **styles[form])
    left.set(xlabel="t", ylabel="y[t] (row 0, head 0, channel 0)", title="the three forms (scalar decay)")
    left.legend(fontsize=8)
    for a_form, b_form in PAIRS:
        diff = np.max(np.abs(forms[a_form][0] - forms[b_form][0])[0], axis=(1, 2))
        middle.plot(np.maximum(diff, 1e-12), label=f"|{a_form} - {b_form}|")
    middle.set(xlabel="t", ylabel="max |difference| over heads, channels", yscale="log",
               title="pairwise differences (float32)")
    middle.legend(fontsize=8)
    inputs = shown["inputs"]
    matrix = parts.ssd_matrix(parts.SsdInputs(inputs.x[:1], inputs.a[:1], inputs.b[:1], inputs.c[:1]))
    image = right.imshow(np.log10(np.abs(matrix) + 1e-12), vmin=-6, cmap="viridis")
    right.set(xlabel="s", ylabel="t", title="log10 |M[t, s]| (attention form)")
    figure.colorbar(image, ax=right, shrink=0.8)
    return figure


def spectrum_figure(spectra: dict[str, np.ndarray], *, length: int, state_size: int, rank_rtol: float) -> Figure:
    """Normalised singular values of the middle block M[T/2:, :T/2+1] at the largest T."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for kind, values in spectra.items():
        axes.plot(np.arange(1, values.size + 1), np.maximum(values, 1e-18), marker="o", markersize=2, label=kind)
    axes.axhline(rank_rtol, linestyle="--", color="gray", linewidth=1, label=f"rank threshold {rank_rtol:g}")
    axes.axvline(state_size, linestyle=":", color="black", linewidth=1, label=f"N = {state_size}")
    axes.set(xlabel="index i", ylabel="sigma_i / sigma_1", yscale="log", xscale="log",
             title=f"spectrum of the block M[T/2:, :T/2+1], T = {length}")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure


@register_experiment("ssd", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args={"state_size": 4, "equality_len": 37},
                     page="docs/papers/ssd.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, state_size: int = 8, chunk_size: int = 16,
        equality_len: int = 100, rank_rtol: float = 1e-5, resume: bool = False) -> Results:
    """Runs the three SSD checks and writes results.md/json and the figures three_way, rank_vs_T, spectrum.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      state_size: N, the SSD state size and the softmax q/k width (>= 2).
      chunk_size: the chunked form's chunk length, one of `kernels.ssd.CHUNK_SIZES`.
      equality_len: T of the three-way-equality input (default 100: not a multiple of the chunk, so the
        padded last chunk is exercised).
      rank_rtol: a singular value counts towards the numerical rank above rank_rtol times the largest.
      resume: require `run_dir` to exist (results are recomputed; there is nothing to resume mid-way).
    """
    _check_args(budget, state_size, chunk_size, equality_len, rank_rtol)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    eq_rows, shown = equality_rows(budget, state_size=state_size, chunk_size=chunk_size, equality_len=equality_len)
    rank_rows, spectra = rank_sweep(budget, state_size=state_size, rank_rtol=rank_rtol)
    cond_rows = condition_rows(length=min(64, budget.seq_len), state_size=state_size, rank_rtol=rank_rtol)
    largest = rank_rows[-1]["T"]
    notes = [
        f"## Three-way equality (T = {equality_len}, chunk {chunk_size}, N = {state_size}, H = 2, P = 4, "
        f"{budget.batch_size} row(s); max over seeds of max|a - b| / max(max|b|, 1))", "",
        *markdown_table(eq_rows, ("decay", "forms", "max_diff_y", "max_diff_state")), "",
        f"## The note's condition: implied mask M / (C B^T) of a diagonal SSM (T = {min(64, budget.seq_len)}, "
        f"N = {state_size})", "",
        *markdown_table(cond_rows, ("case", "mask_ss_rank", "max_sigma2_over_sigma1", "expected_1SS")), "",
        f"## Semiseparable rank against T (random weights, rtol {rank_rtol:g}, max over seeds)", "",
        "largest_possible = ceil(T/2): the middle block's smaller side, i.e. full rank.",
    ]
    figures = {
        "three_way": three_way_figure(shown),
        "rank_vs_T": line_figure(
            {kind: ([r["T"] for r in rank_rows], [r[kind] for r in rank_rows])
             for kind in ("softmax", "ssd_scalar", "ssd_diagonal")},
            xlabel="T", ylabel="semiseparable rank (numerical)", logx=True, logy=True,
            title=f"rank explosion of softmax vs the SSD bound N = {state_size}",
            hlines={f"N = {state_size}": float(state_size)}),
        "spectrum": spectrum_figure(spectra, length=largest, state_size=state_size, rank_rtol=rank_rtol),
    }
    return experiment.write(
        rank_rows, columns=("T", "softmax", "ssd_scalar", "ssd_diagonal", "bound_N", "largest_possible"),
        title="SSD: three-way equality, the 1-SS condition, and softmax rank explosion", notes=notes,
        figures=figures, extra={"equality": eq_rows, "condition": cond_rows, "state_size": state_size,
                                "chunk_size": chunk_size, "equality_len": equality_len, "rank_rtol": rank_rtol})
