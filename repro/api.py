"""API (Adaptive Prototype Imputation, ICML 2026): zero fill vs SCOPE prototype fill vs SCOPE + DIAM fill of missing
modalities on synthetic multimodal sentiment data, against the test missing rate.

Per seed, one model per fill (`zero`, `prototype`, `diam`; `icml26zoo.multimodal.api`) is trained on the synthetic
MSA data (`api_data.synthetic_msa`: text 32-d, audio 8-d, vision 12-d, T = 20, text most informative) with random
per-sample missingness (1, 2 or 3 modalities available, uniformly), by the loop of `repro/api_parts.py` (SCOPE's
epoch-end prototype update does not fit the shared trainer). Each model is then tested on fresh data at every
missing rate: each modality of each test sample missing with that probability (at least one kept).

Scores: mae; acc7 (7 classes of the clipped prediction); acc2 (sign); class_acc (the class used for imputation,
estimated from the available modalities, against the true class, over samples missing something); imp_err (relative
imputation error Σ|fill − x|² / Σ|x|² over the missing modalities in the model's projected space; 1 for zero fill).
Rows: mean ± std over seeds. The `Budget` fields: `steps` = epochs, `batch_size`, `seq_len` = T, `seeds`.

    from icml26zoo import repro
    results = repro.run("api", "runs/api", budget="quick")

From a shell: `python -m icml26zoo.repro api [--smoke | --quick] --out DIR [fills=zero,prototype,diam]
[missing_rates=0,0.3,0.5,0.7] [train_size=1024] [test_size=512] [dim=16] [cross_layers=2] [memory_layers=3]`.
"""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from icml26zoo.multimodal import api, api_data
from icml26zoo.repro import api_parts as parts
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, mean_std_text
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_int, check_interval

__all__ = ["FILLS", "FULL", "QUICK", "SMOKE", "SMOKE_ARGS", "run"]

FULL = Budget(steps=8, batch_size=64, seq_len=20, seeds=(0, 1, 2))
QUICK = Budget(steps=4, batch_size=64, seq_len=20, seeds=(0, 1, 2))
# One fill (the full method) on a tiny model: 2 epochs of 2 batches of 16 rows of 6 steps, one rate, one seed.
SMOKE = Budget(steps=2, batch_size=16, seq_len=6, seeds=(0,))
SMOKE_ARGS = {"fills": ("diam",), "missing_rates": (0.5,), "train_size": 32, "test_size": 16, "dim": 4,
              "cross_layers": 1, "memory_layers": 1, "kernel_size": 3}

FILLS = api.FILLS
SCORES = ("mae", "acc7", "acc2", "class_acc", "imp_err")
COLUMNS = ("fill", "missing_rate", *SCORES)
_TEST_SEED = 10**6  # test data and masks come from seeds disjoint from the training seeds


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


@register_experiment("api", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, page="docs/papers/api.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, fills: tuple[str, ...] = FILLS,
        missing_rates: tuple[float, ...] = (0.0, 0.3, 0.5, 0.7), train_size: int = 1024, test_size: int = 512,
        dim: int = 16, cross_layers: int = 2, memory_layers: int = 3, kernel_size: int = 5,
        resume: bool = False) -> Results:
    """Trains one model per fill and seed, tests it at every missing rate; writes results.md/json and `scores`.

    Args:
      run_dir: where to write.
      budget: see the module docstring for what each field sizes (default FULL).
      fills: a subset of ("zero", "prototype", "diam").
      missing_rates: test missing rates in [0, 1).
      train_size / test_size: samples per seed (train_size a multiple of the batch size is fully used).
      dim, cross_layers, memory_layers, kernel_size: the model's d, depths and Conv1d kernel.
      resume: require `run_dir` to exist (everything is recomputed).
    """
    fills = check_names("fills", fills, FILLS)
    if not missing_rates:
        raise ValueError("missing_rates must name at least one rate in [0, 1), got none")
    for rate in missing_rates:
        check_interval("missing_rates[i]", rate, 0.0, 1.0, closed="left")
    check_int("train_size", train_size, minimum=budget.batch_size)
    check_int("test_size", test_size)
    msa = api_data.MSAConfig(seq_len=budget.seq_len)
    settings = parts.TrainSettings(epochs=budget.steps, batch_size=budget.batch_size)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    per_seed: dict[tuple[str, float], list[dict[str, float]]] = {}
    history: dict[str, list] = {}
    for seed in budget.seeds:
        train = api_data.synthetic_msa(train_size, seed, msa)
        test = api_data.synthetic_msa(test_size, _TEST_SEED + seed, msa)
        for fill in fills:
            config = api.APIConfig(input_dims=msa.dims, seq_len=budget.seq_len, dim=dim,
                                   num_heads=2 if dim % 2 == 0 else 1, kernel_size=kernel_size,
                                   cross_layers=cross_layers, memory_layers=memory_layers, fill=fill)
            model, losses = parts.train_model(config, train, settings, seed=seed)
            history[f"{fill} seed {seed}"] = losses
            for rate in missing_rates:
                mask = api_data.missing_mask(test_size, rate, _TEST_SEED + seed)
                per_seed.setdefault((fill, rate), []).append(parts.evaluate(model, test, mask))
    rows = [{"fill": fill, "missing_rate": f"{rate:g}",
             **{score: _cell([s[score] for s in found]) for score in SCORES}}
            for (fill, rate), found in per_seed.items()]
    notes = [f"Synthetic MSA (T = {budget.seq_len}; text 32-d, audio 8-d, vision 12-d; text the most informative), "
             f"{train_size} training and {test_size} test samples per seed; model d = {dim}, {cross_layers} "
             f"cross-modal and {memory_layers} memory layers; Adam lr {settings.lr}, value clip {settings.grad_clip}; "
             f"trained with 1-3 random available modalities per sample. Mean ± std over seeds {budget.seeds}. "
             "zero: missing modalities left at zero; prototype: SCOPE's class prototype (class estimated from the "
             "available modalities at test); diam: SCOPE + DIAM's personalised prototype."]
    return experiment.write(
        rows, columns=COLUMNS, title="API: zero vs prototype vs prototype + DIAM imputation against missingness",
        notes=notes, figures={"scores": scores_figure(per_seed, fills, tuple(missing_rates))},
        extra={"per_seed": {f"{fill} {rate:g}": s for (fill, rate), s in per_seed.items()}, "losses": history})
