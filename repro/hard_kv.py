"""Reproduction: HARD-KV cache compression against the full cache on a trained byte LM.

Paper: HARD-KV (arXiv 2606.28831); docs/papers/hard_kv.md. The tiny attention LM (`llama_tiny`: 2 layers,
d_model 64, 4 query / 2 KV heads) is trained by the shared trainer on the byte corpus, once per seed. Its
per-(layer, KV head) temperatures are calibrated on `sequences` byte sequences from the middle of Python stdlib
modules; on other sequences of the same modules each budget's HARD-KV cache is compared with the full cache under
teacher forcing (`longctx.hard_kv_eval.compare_with_full`: the first `prompt` tokens prefilled, the rest fed one
per step): greedy next-token agreement, logit errors, the rows each head holds at the end, and the cache bytes per
token. Each budget below 1 also runs the static-budget baseline at the same memory ("sink+recent": the sink plus
the newest rows fill the cap, StreamingLLM-style).

    python -m icml26zoo.repro hard_kv --out runs/repro/hard_kv          # FULL: 400 steps of 8 x 256 bytes
    python -m icml26zoo.repro hard_kv --quick                           # 30 steps, T = 64
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sysconfig
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from icml26zoo.longctx.hard_kv import HardKVConfig, cache_rows
from icml26zoo.longctx.hard_kv_calibrate import calibrate_head_scores
from icml26zoo.longctx.hard_kv_eval import compare_with_full
from icml26zoo.longctx.hard_kv_model import HardKVLM, memory_per_token
from icml26zoo.repro.common import Budget, Experiment, Results
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import tiny_byte_lm
from icml26zoo.validation import check_int, check_interval

__all__ = ["FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "STDLIB_FILES", "evaluate", "run", "stdlib_bytes"]

STDLIB_FILES = ("functools.py", "argparse.py", "dataclasses.py", "inspect.py", "typing.py", "pathlib.py")
# The page's run: llama_tiny trained 400 steps of 8 x 256 bytes; evaluated at T = seq_len with 6 sequences.
FULL = Budget(steps=400, batch_size=8, seq_len=256, seeds=(0,))
QUICK = Budget(steps=30, batch_size=8, seq_len=64, seeds=(0,))
QUICK_ARGS = {"budgets": (0.5, 1.0), "sequences": 2, "window": 8, "recent": 4, "interval": 8}
# Every path (training, calibration, a budget < 1 with its baseline) at the smallest size.
SMOKE = Budget(steps=2, batch_size=2, seq_len=32, seeds=(0,))
SMOKE_ARGS = {"budgets": (0.5,), "sequences": 1, "window": 4, "recent": 2, "interval": 4}
COLUMNS = ("seed", "method", "budget", "full_bytes_per_token", "compressed_bytes_per_token", "ratio", "agreement",
           "max_logit_error", "mean_logit_error", "rows_per_head")


@register_experiment("hard_kv", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/hard_kv.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, budgets: Sequence[float] = (0.25, 0.5, 1.0),
        top_p: float = 0.9, sequences: int = 6, prompt: int | None = None, window: int = 16, recent: int = 8,
        interval: int = 16, resume: bool = False) -> Results:
    """Trains the LM per seed, calibrates HARD-KV and compares every budget with the full cache; writes
    results.md/json and budgets.png.

    Args:
      run_dir: the experiment's directory (cells, the byte corpus, results).
      budget: steps, batch size, sequence length T (training and evaluation) and seeds of the LM.
      budgets: cache budgets in (0, 1] (rows as a fraction of T), distinct.
      top_p: the nucleus mass p of the calibration and the selection, in (0, 1].
      sequences: calibration and evaluation sequences, 1 .. 6 (one stdlib module each).
      prompt: tokens prefilled before the teacher-forced steps (None: T / 2), in [1, T − 1].
      window, recent, interval: HARD-KV's W_q window queries, W_r forced recent rows and Δ rows per interval.
      resume: require run_dir to exist; finished cells are reused either way.
    """
    budgets = tuple(budgets)
    if not budgets or len(set(budgets)) != len(budgets):
        raise ValueError(f"budgets must be distinct numbers in (0, 1], got {list(budgets)}")
    for value in budgets:
        check_interval("budgets[i]", value, 0, 1, closed="right")
    check_interval("top_p", top_p, 0, 1, closed="right")
    check_int("sequences", sequences, maximum=len(STDLIB_FILES))
    length = budget.seq_len
    prompt = length // 2 if prompt is None else prompt
    check_int("prompt", prompt, maximum=length - 1)
    for name, value in (("window", window), ("recent", recent), ("interval", interval)):
        check_int(name, value)
    for value in budgets:  # the cache must hold its forced rows: ValueError naming the budget otherwise
        cache_rows(HardKVConfig(budget=value, top_p=top_p, window=window, recent=recent, interval=interval), length)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    config = _config(experiment)
    devices = jax.devices()[:1]
    rows, calibration = [], {}
    options = {"budgets": budgets, "top_p": top_p, "length": length, "prompt": prompt, "sequences": sequences,
               "window": window, "recent": recent, "interval": interval}
    for seed in budget.seeds:
        cell = f"lm_seed{seed}"
        experiment.train_cell(cell, experiment.cell_config(config, seed=seed, checkpoints=1), devices=devices,
                              final_eval=False)

        def measure(cell: str = cell) -> dict:
            return evaluate(load_run(experiment.cell_dir(cell), devices=devices)[1], **options)

        # Kept in the cell: a resumed run reuses a finished evaluation as it reuses the trained cell.
        result = stored(experiment.cell_dir(cell) / "hard_kv_eval.json", options, measure)
        rows += [{"seed": seed, **row} for row in result["rows"]]
        calibration[seed] = {"temperature": result["temperature"], "oracle_fraction": result["oracle_fraction"]}
    shown = [{**row, "rows_per_head": ", ".join(f"{v:.1f}" for v in np.ravel(row["rows_per_head"]))} for row in rows]
    notes = [
        f"Model: the tiny attention LM (2 layers, d_model 64, 4 query / 2 KV heads) trained by the shared trainer on "
        f"the byte corpus. Calibration: {sequences} sequence(s) of T = {length} bytes from the middle of "
        f"{', '.join(STDLIB_FILES[:sequences])}; evaluation: {sequences} other sequence(s) of the same modules, the "
        f"first {prompt} bytes prefilled, then {length - prompt} teacher-forced decode steps (max_len {length}).",
        f"HARD-KV: p = {top_p}, window W = {window}, recent W_r = {recent}, sink 1, interval Δ = {interval}, SnapKV "
        "kernel 7. agreement: share of decode steps whose greedy next byte equals the full model's; logit errors "
        "over all steps and the vocabulary; bytes per token count every array of each cache per token of max_len; "
        "sink+recent: the static-budget baseline at the same memory; rows_per_head: rows held at the end per "
        "(layer, KV head), mean over the sequences.",
        "Calibrated temperatures [layer, KV head] and the raw attention's mean nucleus fraction n*/N: "
        + "; ".join(f"seed {seed}: T* {np.round(c['temperature'], 3).tolist()}, n*/N "
                    f"{np.round(c['oracle_fraction'], 3).tolist()}" for seed, c in calibration.items()) + ".",
    ]
    return experiment.write(shown, columns=COLUMNS, notes=notes, figures={"budgets": _figure(rows)},
                            extra={"calibration": calibration, "rows_per_head": [r["rows_per_head"] for r in rows]},
                            title="HARD-KV against the full cache on a trained byte LM (teacher forcing)")


def _config(experiment: Experiment) -> TrainConfig:
    """llama_tiny (the tiny byte LM) with its corpus under the run directory, max_seq_len T, one final eval."""
    config = tiny_byte_lm("attention")
    budget = experiment.budget
    model = dataclasses.replace(config.model, max_seq_len=max(config.model.max_seq_len, budget.seq_len))
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "tfds"))
    warmup = config.optim.warmup_steps if config.optim.warmup_steps < budget.steps else max(1, budget.steps // 10)
    return dataclasses.replace(config, model=model, data=data, eval_every=0, eval_batches=2,
                               log_every=max(1, budget.steps // 25),
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


def stdlib_bytes(count: int, length: int, offset: int = 0) -> np.ndarray:
    """count byte sequences [count, length] int32, each from the middle of one stdlib module (after `offset`)."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    rows = []
    for name in STDLIB_FILES[:count]:
        data = (root / name).read_bytes()
        start = len(data) // 3 + offset
        rows.append(np.frombuffer(data[start:start + length], np.uint8).astype(np.int32))
    return np.stack(rows)


def evaluate(model: Any, budgets: Sequence[float], *, top_p: float, length: int, prompt: int, sequences: int,
             window: int = 16, recent: int = 8, interval: int = 16) -> dict[str, Any]:
    """Calibrates on `sequences` stdlib sequences, then compares each budget with the full cache on others:
    {"temperature", "oracle_fraction", "rows"}, a row per (method, budget)."""
    calibration = jnp.asarray(stdlib_bytes(sequences, length))
    scores = calibrate_head_scores(model, calibration, top_p=top_p)
    tokens = jnp.asarray(stdlib_bytes(sequences, length, offset=4 * length))
    rows = []
    for budget in budgets:
        config = HardKVConfig(budget=budget, top_p=top_p, window=window, recent=recent, interval=interval)
        methods = [("hard_kv", config)]
        if budget < 1:
            # The static-budget baseline at the same memory: forced rows fill the cap (sink + the newest rows).
            streaming = dataclasses.replace(config, recent=cache_rows(config, length) - interval - config.sink)
            methods.append(("sink+recent", streaming))
        for method, method_config in methods:
            lm = HardKVLM(model, scores, method_config)
            rows.append({"method": method, "budget": budget, **memory_per_token(model, lm, sequences, length),
                         **compare_with_full(model, lm, tokens, prompt)})
    return {"temperature": np.asarray(scores.temperature).tolist(),
            "oracle_fraction": np.asarray(scores.oracle_fraction).tolist(), "rows": rows}


def _figure(rows: list[dict]) -> Figure:
    """Left: cache bytes ratio and next-token agreement against the budget; right: rows kept per head."""
    figure = Figure(figsize=(9.0, 3.4), layout="constrained")
    left, right = figure.subplots(1, 2)
    first = rows[0]["seed"]
    mine = [row for row in rows if row["method"] == "hard_kv" and row["seed"] == first]
    baseline = [row for row in rows if row["method"] == "sink+recent" and row["seed"] == first]
    budgets = [row["budget"] for row in mine]
    left.plot(budgets, [row["ratio"] for row in mine], "o-", label="cache bytes / full cache")
    left.plot(budgets, [row["agreement"] for row in mine], "s-", label="next-token agreement, HARD-KV")
    if baseline:
        left.plot([row["budget"] for row in baseline], [row["agreement"] for row in baseline], "^--",
                  label="next-token agreement, sink + recent")
    left.set(xlabel="budget (rows / max_len)", ylim=(0, 1.3), title=f"seed {first}")
    left.legend(fontsize=8)
    for row in mine:
        heads = np.asarray(row["rows_per_head"]).ravel()
        right.plot(np.arange(heads.size), heads, "o-", label=f"budget {row['budget']}")
    right.set(xlabel="(layer, KV head)", ylabel="rows held at the end")
    right.legend(fontsize=8)
    return figure
