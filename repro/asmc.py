"""Reproduction: ASMC particle decoding toward p^α against plain sampling and best-of-N at equal compute.

Paper: ASMC, adaptive sequential Monte Carlo decoding with cache-coherent resampling (ICML 2026); the target,
weights and block resampling follow Power-SMC (Azizi et al., arXiv 2602.10273). See docs/papers/asmc.md.

The claims tested at small scale: sampling from the power-shaped target p(y | x)^α (α > 1) answers more
problems correctly than sampling from p itself; collapse severity (a low ESS_min / N during decoding) marks the
problems the sampler gets wrong; the resampling scheme (multinomial, systematic, residual) matters little.
A tiny 2-layer attention LM (`train.presets.tiny_model`) is trained through the shared trainer on synthetic
D-digit addition with every number written least significant digit first (`zoo.repro.asmc_parts`), stopped while
still imperfect, and then decodes the answers of `num_problems` held-out problems, each method with N
particles (or samples) of D + 2 tokens, i.e. the same number of decode steps:

- "sampling T=1": N ancestral samples (ASMC with α = 1, T = 1: all weights equal); the accuracy is that of one
  sample, and `pass_at_n` whether any of the N is right (an oracle verifier's best-of-N, for reference);
- "sampling T=1/α": N samples from the tempered proposal alone (weights ignored), the usual stand-in for p^α;
- "best-of-N by log p": the likeliest of the N ancestral samples under the model (no verifier);
- "ASMC α T scheme": the particle population after the final resampling, with the proposal T = 1/α (the
  variance-minimizing one) or T = 1 (ancestral: the weights alone turn p into p^α); its accuracy is the
  weighted fraction of correct particles, the probability that the returned draw is correct;
- "ASMC α T adaptive": N/4 particles growing up to N on collapse (ESS / N < `collapse_threshold`).

Example::

    from icml26zoo import repro
    results = repro.run("asmc", "runs/asmc", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Sequence

import jax
import numpy as np

from icml26zoo.decode.asmc import ASMCConfig, asmc_decode
from icml26zoo.decode.resampling import RESAMPLERS
from icml26zoo.repro import asmc_parts as task
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig
from icml26zoo.train.presets import tiny_model
from icml26zoo.validation import check_int, check_interval

__all__ = ["FULL", "PROPOSALS", "QUICK", "QUICK_ARGS", "SCHEMES", "SMOKE", "SMOKE_ARGS", "run", "training_config"]

DIGITS = 3
# Rows of 3D + 3 input tokens (the trainer's seq_len).
QUICK = Budget(steps=60, batch_size=32, seq_len=3 * DIGITS + 3, seeds=(0,))
FULL = Budget(steps=600, batch_size=64, seq_len=3 * DIGITS + 3, seeds=(0, 1))
QUICK_ARGS = {"particles": (8,), "alphas": (4.0,), "schemes": ("systematic",), "num_problems": 12}
# Every code path in seconds: 2 training steps, then every method (both proposals, the adaptive run) with N = 4
# on 2 problems.
SMOKE = Budget(steps=2, batch_size=4, seq_len=3 * DIGITS + 3, seeds=(0,))
SMOKE_ARGS = {"particles": (4,), "alphas": (4.0,), "schemes": ("systematic",), "num_problems": 2}
SCHEMES = tuple(sorted(RESAMPLERS))
PROPOSALS = ("tempered", "ancestral")


@register_experiment("asmc", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/asmc.md", volatile=("ms_per_problem",))
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, particles: Sequence[int] = (4, 8, 16),
        alphas: Sequence[float] = (2.0, 4.0), schemes: Sequence[str] = SCHEMES,
        proposals: Sequence[str] = PROPOSALS, num_problems: int = 200,
        block_size: int = 1, collapse_threshold: float = 0.3, resume: bool = False) -> Results:
    """Trains the addition LM once per seed and compares the decoders on held-out problems.

    Args:
      run_dir: the experiment's directory (cells, results.md/json, accuracy.png, ancestry.png).
      budget: training steps, batch size and seeds; seq_len must be 3 · DIGITS + 3 (the row length).
      particles: the N values (>= 4, distinct), particles or samples per problem for every method.
      alphas: the powers α > 1 of the target (ASMC, and T = 1/α for tempered sampling).
      schemes: resampling schemes for ASMC, from SCHEMES (the adaptive run uses the first).
      proposals: ASMC's proposals, from PROPOSALS: "tempered" (T = 1/α, the variance-minimizing prefix-only
        proposal) and/or "ancestral" (T = 1: the weights alone turn p into p^α).
      num_problems: held-out problems per seed (>= 1).
      block_size: tokens between resampling checks (the answers are DIGITS + 2 tokens long).
      collapse_threshold: ESS / N below which the adaptive population doubles.
      resume: require run_dir to exist; a finished training cell, and its evaluation under the same options,
        is reused either way.
    """
    particles, alphas, schemes = _check_arguments(budget, particles, alphas, schemes, num_problems, block_size,
                                                  collapse_threshold)
    proposals = check_names("proposals", proposals, PROPOSALS)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed, traces = [], []
    key = {"particles": list(particles), "alphas": [float(a) for a in alphas], "schemes": list(schemes),
           "proposals": list(proposals), "num_problems": num_problems, "block_size": block_size,
           "collapse_threshold": float(collapse_threshold)}
    for seed in budget.seeds:
        cell = _train(experiment, seed)
        # Each seed's evaluation is kept next to its cell (keyed by the options), so a resumed run reuses it.
        evaluation = stored(experiment.cell_dir(cell) / "evaluation.json", key, lambda cell=cell, seed=seed: _evaluate(
            load_run(experiment.cell_dir(cell), devices=jax.devices()[:1])[1], seed, particles, alphas, schemes,
            proposals, num_problems, block_size, collapse_threshold))
        per_seed.append(evaluation["rows"])
        traces.append(evaluation["ancestry"])
    rows = _mean_rows(per_seed)
    collapse = _collapse_split(per_seed)
    figures = {"accuracy": _accuracy_figure(rows, alphas[-1], schemes[0]), "ancestry": _ancestry(traces[0])}
    return experiment.write(
        rows, columns=("method", "particles", "accuracy", "pass_at_n", "answer_log_p", "distinct_answers",
                       "ess_min_fraction", "mean_particles", "ms_per_problem"),
        title="ASMC (p^alpha target) vs sampling and best-of-N on 3-digit addition, equal decode steps",
        notes=_notes(budget, num_problems, block_size, collapse_threshold, collapse), figures=figures,
        extra={"collapse_vs_failure": collapse, "per_seed": per_seed},
    )


def _check_arguments(budget, particles, alphas, schemes, num_problems, block_size, collapse_threshold):
    if not isinstance(budget, Budget):
        raise ValueError(f"budget must be a repro.common.Budget, got {type(budget).__name__}")
    if budget.seq_len != 3 * DIGITS + 3:
        raise ValueError(f"budget.seq_len must be {3 * DIGITS + 3} (rows of {DIGITS}-digit addition), "
                         f"got {budget.seq_len}")
    particles = tuple(particles)
    if not particles or len(set(particles)) != len(particles):
        raise ValueError(f"particles must hold at least one N and no repeats, got {list(particles)}")
    for n in particles:
        check_int("particles[i]", n, minimum=4)
    alphas = tuple(alphas)
    if not alphas or len(set(alphas)) != len(alphas):
        raise ValueError(f"alphas must hold at least one alpha and no repeats, got {list(alphas)}")
    for alpha in alphas:
        check_interval("alphas[i] (the power of the target)", alpha, 1, math.inf, closed="neither")
    schemes = check_names("schemes", schemes, SCHEMES)
    check_int("num_problems", num_problems)
    check_int("block_size", block_size)
    check_interval("collapse_threshold", collapse_threshold, 0, 1, closed="right")
    return particles, alphas, schemes


def _train_config(experiment: Experiment, seed: int) -> TrainConfig:
    """The tiny attention LM (d_model 64, 2 layers, vocabulary 16), learning rate 3e-3 (10 warmup steps, then
    the trainer's default decay). `data` names the built-in corpus only to satisfy the config: the batches come
    from `task.training_batches`."""
    config = TrainConfig(
        model=tiny_model("attention", vocab_size=task.VOCAB, max_seq_len=3 * DIGITS + 4),
        data=DataConfig(name="pystdlib"), optim=OptimConfig(learning_rate=3e-3, warmup_steps=10),
        log_every=max(1, experiment.budget.steps // 20), eval_every=0, eval_batches=0,
    )
    return experiment.cell_config(config, seed=seed)


def _train(experiment: Experiment, seed: int) -> str:
    """Trains (or reuses) the seed's addition LM; returns its cell name."""
    cell = f"addition_lm_seed{seed}"
    config = _train_config(experiment, seed)
    batches = task.training_batches(seed, experiment.budget.batch_size, DIGITS)
    experiment.train_cell(cell, config, data=batches, devices=jax.devices()[:1])
    return cell


def _asmc_name(alpha: float, proposal: str, variant: str) -> str:
    temperature = f"1/{alpha:g}" if proposal == "tempered" else "1"
    return f"ASMC a={alpha:g} T={temperature} {variant}"


def _methods(particles, alphas, schemes, proposals, block_size, collapse_threshold):
    """(method name, N, ASMCConfig, how the particles are read) for every decoder compared."""
    common = {"max_new_tokens": task.answer_length(DIGITS), "block_size": block_size}
    plain = {"ess_threshold": 1e-6, "collapse_threshold": 1e-6}
    for n in particles:
        ancestral = ASMCConfig(num_particles=n, alpha=1.0, temperature=1.0, **common, **plain)
        yield "sampling T=1", n, ancestral, "mean"
        yield "best-of-N by log p", n, ancestral, "best"
        for alpha in alphas:
            tempered = ASMCConfig(num_particles=n, alpha=1.0, temperature=1 / alpha, **common, **plain)
            yield f"sampling T=1/{alpha:g}", n, tempered, "mean"
            for proposal in proposals:
                temperature = 1 / alpha if proposal == "tempered" else 1.0
                for scheme in schemes:
                    config = ASMCConfig(num_particles=n, alpha=alpha, temperature=temperature, scheme=scheme,
                                        collapse_threshold=1e-6, **common)
                    yield _asmc_name(alpha, proposal, scheme), n, config, "weighted"
                adaptive = ASMCConfig(num_particles=max(1, n // 4), max_particles=n, alpha=alpha,
                                      temperature=temperature, scheme=schemes[0],
                                      collapse_threshold=collapse_threshold, **common)
                yield _asmc_name(alpha, proposal, "adaptive"), n, adaptive, "weighted"


def _evaluate(model, seed, particles, alphas, schemes, proposals, num_problems, block_size,
              collapse_threshold) -> dict:
    """{"rows": one per method and N, "ancestry": the particle genealogy of one ASMC run (the largest N and α,
    the last proposal in `proposals`, the first scheme, the first problem)} for one trained model."""
    rows_tokens, sums = task.problems(np.random.default_rng([seed, 99]), num_problems, DIGITS)
    prompts = rows_tokens[:, : task.prompt_length(DIGITS)]
    shown = (_asmc_name(alphas[-1], proposals[-1], schemes[0]), max(particles))
    rows, ancestry = [], None
    methods = _methods(particles, alphas, schemes, proposals, block_size, collapse_threshold)
    for name, n, config, read in methods:
        stats = []
        # Compiled outside the timed loop (methods of one structure share the compiled sampler).
        asmc_decode(model, prompts[0], key=jax.random.key(0), config=config).tokens.block_until_ready()
        start = time.perf_counter()
        for index, (prompt, total) in enumerate(zip(prompts, sums, strict=True)):
            result = jax.device_get(asmc_decode(model, prompt, key=jax.random.key(1000 * seed + index),
                                                config=config))
            stats.append(_problem_stats(result, int(total), read))
            if index == 0 and (name, n) == shown:
                ancestry = {"ancestors": np.asarray(result.ancestors),
                            "ess_fraction": np.asarray(result.ess) / np.asarray(result.num_active),
                            "num_active": np.asarray(result.num_active), "active": np.asarray(result.active),
                            "title": f"{name}, N={n}: particle ancestry (first problem)"}
        elapsed = 1000 * (time.perf_counter() - start) / num_problems
        rows.append(_row(name, n, stats, elapsed))
    return {"rows": rows, "ancestry": ancestry}


def _problem_stats(result, total: int, read: str) -> dict:
    live = np.asarray(result.active)
    correct = task.answer_correct(result.tokens, total, DIGITS)[live]
    log_p = np.asarray(result.cum_log_p)[live] / task.answer_length(DIGITS)
    weights = np.asarray(jax.nn.softmax(result.log_weights))[live]
    if read == "best":
        pick = int(np.argmax(log_p))
        accuracy, answer_log_p = float(correct[pick]), float(log_p[pick])
    elif read == "weighted":
        accuracy, answer_log_p = float(weights @ correct), float(weights @ log_p)
    else:
        accuracy, answer_log_p = float(correct.mean()), float(log_p.mean())
    fraction = np.asarray(result.ess) / np.asarray(result.num_active)
    return {"accuracy": accuracy, "pass": float(correct.any()), "answer_log_p": answer_log_p,
            "distinct": len({tuple(row) for row in np.asarray(result.tokens)[live]}),
            "ess_min_fraction": float(fraction.min()), "particles": float(live.sum())}


def _row(name: str, n: int, stats: list[dict], elapsed_ms: float) -> dict:
    def mean(key):
        return statistics.fmean(s[key] for s in stats)

    asmc = name.startswith("ASMC")
    return {"method": name, "particles": n, "accuracy": mean("accuracy"),
            "pass_at_n": None if asmc else mean("pass"), "answer_log_p": mean("answer_log_p"),
            "distinct_answers": mean("distinct"), "ess_min_fraction": mean("ess_min_fraction") if asmc else None,
            "mean_particles": mean("particles"), "ms_per_problem": elapsed_ms,
            "per_problem": [{"accuracy": s["accuracy"], "ess_min_fraction": s["ess_min_fraction"]} for s in stats]}


def _mean_rows(per_seed: list[list[dict]]) -> list[dict]:
    """Rows averaged over seeds (numeric columns; None stays None)."""
    merged = []
    for rows in zip(*per_seed, strict=True):
        row = {key: value for key, value in rows[0].items() if key != "per_problem"}
        for key, value in row.items():
            if isinstance(value, float):
                row[key] = statistics.fmean(r[key] for r in rows)
        merged.append(row)
    return merged


def _collapse_split(per_seed: list[list[dict]]) -> dict:
    """Per ASMC method: mean ESS_min / N over problems solved (accuracy >= 0.5) and failed, and their counts."""
    split = {}
    for rows in per_seed:
        for row in rows:
            if not row["method"].startswith("ASMC"):
                continue
            entry = split.setdefault(f"{row['method']} N={row['particles']}", {"solved": [], "failed": []})
            for problem in row["per_problem"]:
                entry["solved" if problem["accuracy"] >= 0.5 else "failed"].append(problem["ess_min_fraction"])
    return {name: {f"ess_min_{k}": (statistics.fmean(v) if v else None) for k, v in entry.items()}
            | {f"num_{k}": len(v) for k, v in entry.items()} for name, entry in split.items()}


def _ancestry(trace: dict):
    """The ancestry figure of a stored trace (see `_evaluate`)."""
    return task.ancestry_figure(np.asarray(trace["ancestors"]), np.asarray(trace["ess_fraction"]),
                                np.asarray(trace["num_active"]), np.asarray(trace["active"]), title=trace["title"])


def _accuracy_figure(rows: list[dict], alpha: float, scheme: str):
    """Accuracy against N for the baselines and, at the largest α, ASMC with the first scheme (and adaptive)."""
    shown = {"sampling T=1", "best-of-N by log p", f"sampling T=1/{alpha:g}"}
    shown |= {_asmc_name(alpha, proposal, variant) for proposal in PROPOSALS for variant in (scheme, "adaptive")}
    series: dict = {}
    for row in rows:
        if row["method"] not in shown:
            continue
        xs, ys = series.setdefault(row["method"], ([], []))
        xs.append(row["particles"])
        ys.append(row["accuracy"])
    figure = line_figure(series, xlabel="particles / samples N (equal decode steps)", ylabel="accuracy",
                         title="Addition accuracy of the returned answer")
    figure.axes[0].set_xticks(sorted({row["particles"] for row in rows}))
    return figure


def _notes(budget: Budget, num_problems: int, block_size: int, collapse_threshold: float, collapse: dict):
    lines = [
        f"Task: {DIGITS}-digit addition, numbers least significant digit first (vocabulary 16); model: 2-layer "
        f"attention LM, d_model 64, trained on answer tokens only; {num_problems} held-out problems per seed.",
        "accuracy: probability that the returned answer is exactly right (sampling: mean over the N samples; "
        "ASMC: weight of the correct particles); pass_at_n: any of the N samples right (oracle verifier); "
        "answer_log_p: mean per-token log p of the returned answer under the model; distinct_answers: distinct "
        "particle answers per problem; ess_min_fraction: min over tokens of ESS / N live; mean_particles: live "
        "particles at the end (adaptive runs start at N/4); ms_per_problem: CPU wall time including dispatch.",
        f"ASMC: proposal T = 1/alpha or T = 1, resampling check every {block_size} token(s) when ESS < N/2 "
        f"(systematic, multinomial or residual); adaptive: N/4 particles, doubling on ESS / N < "
        f"{collapse_threshold:g}, up to N. Timings are on a shared, loaded machine: compare them loosely.",
    ]
    worst = [f"{name}: {v['ess_min_solved']:.3f} solved ({v['num_solved']}) vs {v['ess_min_failed']:.3f} "
             f"failed ({v['num_failed']})" for name, v in collapse.items()
             if v["ess_min_solved"] is not None and v["ess_min_failed"] is not None]
    if worst:
        lines.append("Mean ESS_min / N on solved vs failed problems: " + "; ".join(worst) + ".")
    return lines


def training_config(run_dir: str | os.PathLike, budget: Budget = QUICK, seed: int = 0) -> TrainConfig:
    """The trainer config of one seed's LM cell (for inspection and tests)."""
    return _train_config(Experiment(run_dir, budget=budget), seed)

