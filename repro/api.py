"""API (Adaptive Prototype Imputation, ICML 2026): zero fill vs SCOPE prototype fill vs SCOPE + DIAM fill of missing
modalities on synthetic multimodal sentiment data, against the test missing rate.

Per seed, one model per fill (`zero`, `prototype`, `diam`) is trained by the shared trainer from preset `api`
(model `api`, objective `api`, dataset `zoo_msa`: text 32-d, audio 8-d, vision 12-d, text the most informative; the
training split complete, and every step keeps 1, 2 or 3 random modalities per sample). The SCOPE prototypes are
rebuilt from the model's epoch cache after every epoch (the cache holds the `train_size` training samples; a batch
size dividing it makes each rebuild see exactly one epoch). Each model is then tested on fresh data (the same
samples at every rate) at every missing rate: each modality of each test sample missing with that probability
(at least one kept), scored by the objective's evaluation.

Scores: mae (of the prediction clipped to [-3, 3]); acc7 (7 classes of the clipped prediction); acc2 (sign);
class_acc (the class used for imputation, estimated from the available modalities, against the true class, over
samples missing something); imp_err (relative imputation error Σ|fill − x|² / Σ|x|² over the missing modalities in
the model's projected space; 1 for zero fill). Rows: mean ± std over seeds. The `Budget` fields: `steps` (optimizer
steps; 16 steps of 64 are one epoch of 1,024 samples), `batch_size`, `seq_len` = 3T (the points of one row: three
modalities of T steps), `seeds`.

    from icml26zoo import repro
    results = repro.run("api", "runs/api", budget="quick")

From a shell: `python -m icml26zoo.repro api [--smoke | --quick] --out DIR [fills=zero,prototype,diam]
[missing_rates=0,0.3,0.5,0.7] [train_size=1024] [test_size=512] [dim=16] [cross_layers=2] [memory_layers=3]`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.configs import load_preset
from icml26zoo.losses.api_objective import api_objective
from icml26zoo.multimodal import api
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data.msa_data import MSAOptions, msa_examples
from icml26zoo.train.step import summarize_eval
from icml26zoo.validation import check_int, check_interval

__all__ = ["FILLS", "FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=128, batch_size=64, seq_len=60, seeds=(0, 1, 2))
QUICK = Budget(steps=64, batch_size=64, seq_len=60, seeds=(0, 1, 2))
# One fill (the full method) on a tiny model: 4 steps of 8 rows (two epochs of 16 samples) of T = 6, one rate.
SMOKE = Budget(steps=4, batch_size=8, seq_len=18, seeds=(0,))
SMOKE_ARGS = {"fills": ("diam",), "missing_rates": (0.5,), "train_size": 16, "test_size": 16, "dim": 4,
              "cross_layers": 1, "memory_layers": 1, "kernel_size": 3}

FILLS = api.FILLS
SCORES = ("mae", "acc7", "acc2", "class_acc", "imp_err")
COLUMNS = ("fill", "missing_rate", *SCORES)
_TEST_SEED = 10**6  # test data and masks come from seeds disjoint from the training data's
_EVAL_NAMES = {"mae": "eval/mae", "acc7": "eval/accuracy", "acc2": "eval/acc2", "class_acc": "eval/class_acc",
               "imp_err": "eval/imp_err"}


def _cell(values: list[float]) -> str:
    return "-" if np.any(np.isnan(values)) else mean_std_text(values)


def scores_figure(per_seed: dict[tuple[str, float], list[dict[str, float]]], fills: tuple[str, ...],
                  rates: tuple[float, ...]) -> Figure:
    """MAE and acc7 (mean over seeds, error bar = std) against the test missing rate, one line per fill."""
    figure = Figure(figsize=(10, 4), layout="constrained")
    for panel, score in zip(figure.subplots(1, 2), ("mae", "acc7"), strict=True):
        for fill in fills:
            values = np.array([[s[score] for s in per_seed[(fill, rate)]] for rate in rates])
            panel.errorbar(rates, values.mean(axis=1), yerr=values.std(axis=1), marker="o", capsize=3, label=fill)
        panel.set(xlabel="test missing rate", ylabel=score)
        panel.grid(True, alpha=0.3)
        panel.legend()
    return figure


def cell_config(experiment: Experiment, fill: str, seed: int, *, train_size: int, test_size: int, dim: int,
                cross_layers: int, memory_layers: int, kernel_size: int) -> TrainConfig:
    """Preset `api` with this cell's fill, sizes, data seed and the experiment's budget (T = seq_len / 3)."""
    config = load_preset("api")
    length = experiment.budget.seq_len // 3
    options = dict(config.model.model_options) | {"seq_len": length, "kernel_size": kernel_size, "fill": fill,
                                                  "cross_layers": cross_layers, "memory_layers": memory_layers,
                                                  "cache_size": train_size}
    model = dataclasses.replace(config.model, d_model=dim, num_heads=2 if dim % 2 == 0 else 1,
                                num_kv_heads=2 if dim % 2 == 0 else 1, model_options=tuple(options.items()))
    data_options = dict(config.data.task_options) | {"sequence_length": length, "train_examples": train_size,
                                                     "eval_examples": test_size, "seed": seed}
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=tuple(data_options.items()))
    config = dataclasses.replace(config, model=model, data=data,
                                 log_every=max(1, experiment.budget.steps // 16))
    return experiment.cell_config(config, seed=seed, checkpoints=1)


@functools.partial(jax.jit, static_argnums=0)
def _sums(graphdef: nnx.GraphDef, state: nnx.State, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    _, sums = api_objective(nnx.merge(graphdef, state), batch, jax.random.key(0), train=False)
    return {name: value for name, value in sums.items() if "/" not in name}


def test_scores(model: nnx.Module, config: TrainConfig, rate: float, seed: int, size: int) -> dict[str, float]:
    """The scores (module docstring) of the trained `model` on `size` fresh samples (seed _TEST_SEED + seed) with
    each modality missing with probability `rate`; class_acc is NaN for the zero fill."""
    options = MSAOptions(**dict(config.data.task_options))
    points, weights, sentiment = msa_examples(options, size, _TEST_SEED + seed, rate)
    batch = {"points": jnp.asarray(points), "weights": jnp.asarray(weights),
             "targets": jnp.broadcast_to(jnp.asarray(sentiment)[:, None, None], weights.shape + (1,))}
    graphdef, state = nnx.split(model)
    sums = jax.device_get(_sums(graphdef, state, batch))
    summary = summarize_eval(sums, None)
    # Nothing to score (no missing modality, or the zero fill's class): NaN, shown as "-", not a ratio 0 / 0.
    empty = {"class_acc": sums.get("class_acc_weight", 0) == 0, "imp_err": sums["imp_err_weight"] == 0}
    return {score: float("nan") if empty.get(score) else float(summary.get(name, float("nan")))
            for score, name in _EVAL_NAMES.items()}


@register_experiment("api", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/api.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, fills: tuple[str, ...] = FILLS,
        missing_rates: tuple[float, ...] = (0.0, 0.3, 0.5, 0.7), train_size: int = 1024, test_size: int = 512,
        dim: int = 16, cross_layers: int = 2, memory_layers: int = 3, kernel_size: int = 5,
        resume: bool = False) -> Results:
    """Trains one model per fill and seed, tests it at every missing rate; writes results.md/json and `scores`.

    Args:
      run_dir: where to write (one trainer workdir per cell, the generated data, the results).
      budget: see the module docstring for what each field sizes (default FULL); seq_len a multiple of 3.
      fills: a subset of ("zero", "prototype", "diam").
      missing_rates: test missing rates in [0, 1).
      train_size / test_size: samples per seed; train_size is the epoch the prototypes are rebuilt from (a
        multiple of the batch size makes every rebuild see exactly one epoch).
      dim, cross_layers, memory_layers, kernel_size: the model's d, depths and Conv1d kernel.
      resume: require `run_dir` to exist; finished cells and their test scores are reused.
    """
    fills = check_names("fills", fills, FILLS)
    if not missing_rates:
        raise ValueError("missing_rates must name at least one rate in [0, 1), got none")
    for rate in missing_rates:
        check_interval("missing_rates[i]", rate, 0.0, 1.0, closed="left")
    check_int("train_size", train_size, minimum=budget.batch_size)
    check_int("test_size", test_size)
    if budget.seq_len % 3:
        raise ValueError(f"budget.seq_len must be 3T (three modalities of T steps), got {budget.seq_len}")
    sizes = {"train_size": train_size, "test_size": test_size, "dim": dim, "cross_layers": cross_layers,
             "memory_layers": memory_layers, "kernel_size": kernel_size}
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed: dict[tuple[str, float], list[dict[str, float]]] = {}
    history: dict[str, Any] = {}
    for seed in budget.seeds:
        for fill in fills:
            name = f"{fill}_seed{seed}"
            config = cell_config(experiment, fill, seed, **sizes)
            experiment.train_cell(name, config, devices=jax.devices()[:1], final_eval=False)
            history[f"{fill} seed {seed}"] = experiment.metrics(name, "train/loss")[1]

            def measure(name: str = name, config: TrainConfig = config, seed: int = seed) -> dict[str, Any]:
                model = load_run(experiment.cell_dir(name), devices=jax.devices()[:1])[1]
                return {f"{rate:g}": test_scores(model, config, rate, seed, test_size) for rate in missing_rates}

            scores = stored(experiment.cell_dir(name) / "test_scores.json",
                            {"missing_rates": list(missing_rates), "test_size": test_size}, measure)
            for rate in missing_rates:
                per_seed.setdefault((fill, rate), []).append(scores[f"{rate:g}"])
    rows = [{"fill": fill, "missing_rate": f"{rate:g}",
             **{score: _cell([s[score] for s in found]) for score in SCORES}}
            for (fill, rate), found in per_seed.items()]
    notes = [f"Synthetic MSA (T = {budget.seq_len // 3}; text 32-d, audio 8-d, vision 12-d; text the most "
             f"informative), {train_size} training and {test_size} test samples per seed; model d = {dim}, "
             f"{cross_layers} cross-modal and {memory_layers} memory layers; trained by the shared trainer (preset "
             f"api: Adam lr 1e-3, value clip 0.6), {budget.steps} steps of {budget.batch_size}, each sample with 1-3 "
             f"random available modalities; prototypes rebuilt after every epoch. Mean ± std over seeds "
             f"{budget.seeds}. zero: missing modalities left at zero; prototype: SCOPE's class prototype (class "
             "estimated from the available modalities at test); diam: SCOPE + DIAM's personalised prototype."]
    return experiment.write(
        rows, columns=COLUMNS, title="API: zero vs prototype vs prototype + DIAM imputation against missingness",
        notes=notes, figures={"scores": scores_figure(per_seed, fills, tuple(missing_rates))},
        extra={"per_seed": {f"{fill} {rate:g}": s for (fill, rate), s in per_seed.items()}, "losses": history})
