"""The protein tokenizer experiment's pieces (repro/protein_tokenizer.py): the cells' configs, the evaluation of a
trained tokenizer on fresh chains (aligned Cα RMSD per decoded prefix, FSQ code usage), the table and the figure.

A cell is one (role, seed): role "nested" trains preset `protein_tokenizer` (nested dropout), role "baseline"
preset `protein_tokenizer_baseline` (every token kept in training), both through the shared trainer. Budget:
steps, batch_size and seeds as they are; seq_len is the longest chain (max_length; chains are drawn with
max_length // 2 to max_length residues) and the model's max_seq_len.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.bio import aligned_rmsd
from icml26zoo.configs import load_preset
from icml26zoo.geometric import random_rotation, rotate_points
from icml26zoo.repro.common import Experiment, spread
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data.backbones import ANGSTROM_PER_UNIT, BackboneOptions, generate
from icml26zoo.vq import usage_statistics

__all__ = ["EVAL_SEED", "PRESETS", "ROLES", "TINY_MODEL", "cell_base", "cell_name", "evaluate_cell",
           "prefix_figure", "role_rows"]

ROLES = ("nested", "baseline")
PRESETS = {"nested": "protein_tokenizer", "baseline": "protein_tokenizer_baseline"}
# A generator seed the dataset's splits (SeedSequence([seed, split])) do not use: fresh evaluation chains.
EVAL_SEED = 20_261_206
# tiny=True (SMOKE): one block of width 16 each side, 8 tokens of levels (4, 3), a few dozen chains.
TINY_MODEL = {"d_model": 16, "num_layers": 1, "num_heads": 2, "mlp_dim": 32}
TINY_OPTIONS = {"levels": (4, 3), "n_tokens": 8, "decoder_layers": 1}
TINY_EXAMPLES = {"train_examples": 32, "eval_examples": 8}


def cell_name(role: str, seed: int) -> str:
    return f"{role}_seed{seed}"


def cell_base(role: str, experiment: Experiment, *, tiny: bool) -> TrainConfig:
    """The role's preset sized by the budget: chains of seq_len // 2 .. seq_len residues, data under the run
    directory, one final evaluation, ~25 logged losses."""
    config = load_preset(PRESETS[role])
    steps, length = experiment.budget.steps, experiment.budget.seq_len
    data_options = dict(config.data.task_options) | {"min_length": max(8, length // 2), "max_length": length}
    model_changes: dict[str, Any] = {"max_seq_len": length}
    options = dict(config.model.model_options)
    if tiny:
        data_options |= TINY_EXAMPLES
        model_changes |= TINY_MODEL
        options |= TINY_OPTIONS
    model = dataclasses.replace(config.model, **model_changes, model_options=tuple(options.items()))
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "data"),
                               task_options=tuple(data_options.items()))
    warmup = config.optim.warmup_steps if config.optim.warmup_steps < steps else max(1, steps // 10)
    return dataclasses.replace(config, model=model, data=data, eval_every=0, log_every=max(1, steps // 25),
                               optim=dataclasses.replace(config.optim, warmup_steps=warmup))


def eval_chains(config: TrainConfig, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` fresh chains of the cell's data options, each randomly rotated (fixed seed): (points [E, N, 3],
    weights [E, N])."""
    options = BackboneOptions(**dict(config.data.task_options))
    points, weights = generate(options, count, np.random.SeedSequence(EVAL_SEED))
    rotations = random_rotation(jax.random.key(EVAL_SEED), (count,))
    return np.asarray(rotate_points(jnp.asarray(points), rotations)), weights


def _measure(model: nnx.Module, points: np.ndarray, weights: np.ndarray, prefixes: Sequence[int]
             ) -> dict[str, Any]:
    graphdef, state = nnx.split(model)

    @jax.jit
    def per_prefix(state, points, weights):
        model = nnx.merge(graphdef, state)
        tokens, _, indices = model.encode(points, weights)
        rmsd = [jnp.mean(aligned_rmsd(model.decode(tokens, weights, jnp.full(points.shape[0], k)), points, weights))
                for k in prefixes]
        exists = (jnp.arange(indices.shape[1])[None] < jnp.sum(weights > 0, axis=1)[:, None]).astype(jnp.float32)
        return jnp.stack(rmsd) * ANGSTROM_PER_UNIT, usage_statistics(indices, model.codebook_size, exists)

    rmsd, usage = per_prefix(state, jnp.asarray(points), jnp.asarray(weights))
    return {"rmsd": [float(v) for v in rmsd], "used_codes": int(usage["used_codes"]),
            "perplexity": float(usage["perplexity"]), "codebook": int(model.codebook_size)}


def evaluate_cell(experiment: Experiment, role: str, seed: int, config: TrainConfig, *, prefixes: Sequence[int],
                  chains: int) -> dict[str, Any]:
    """{"rmsd": [Å per prefix], "used_codes", "perplexity", "codebook"} of the trained cell on `chains` fresh
    rotated chains; kept in the cell's directory (prefixes.json), so a resumed run does not reopen the model."""
    def measure() -> dict[str, Any]:
        model = load_run(experiment.cell_dir(cell_name(role, seed)), devices=jax.devices()[:1])[1]
        return _measure(model, *eval_chains(config, chains), prefixes)

    path = experiment.cell_dir(cell_name(role, seed)) / "prefixes.json"
    return stored(path, {"prefixes": list(prefixes), "chains": chains}, measure)


def _summary(values: Sequence[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "spread": spread(values),
            "per_seed": ", ".join(f"{v:.3f}" for v in values)}


def role_rows(measured: Mapping[str, list[dict[str, Any]]], prefixes: Sequence[int]) -> tuple[list[dict], list[str]]:
    """One row per (role, tokens decoded): mean Cα RMSD (Å) over seeds, its spread (max − min) and per-seed values,
    and the role's FSQ usage on the same chains (used codes of the codebook, perplexity; means over seeds)."""
    rows = []
    for role, cells in measured.items():
        used = _summary([c["used_codes"] for c in cells])
        perplexity = _summary([c["perplexity"] for c in cells])
        for index, tokens in enumerate(prefixes):
            rmsd = _summary([c["rmsd"][index] for c in cells])
            rows.append({"role": role, "tokens": tokens, "rmsd_A": rmsd["mean"], "rmsd_A_spread": rmsd["spread"],
                         "rmsd_A_per_seed": rmsd["per_seed"], "used_codes": used["mean"],
                         "codebook": cells[0]["codebook"], "perplexity": perplexity["mean"],
                         "perplexity_spread": perplexity["spread"]})
    columns = ["role", "tokens", "rmsd_A", "rmsd_A_spread", "rmsd_A_per_seed", "used_codes", "codebook",
               "perplexity", "perplexity_spread"]
    return rows, columns


def prefix_figure(rows: Sequence[Mapping[str, Any]], seeds: int) -> Figure:
    """Aligned Cα RMSD against the number of tokens decoded, per role (mean over seeds; bars: min and max)."""
    figure = Figure(figsize=(6.0, 4.0), layout="constrained")
    axes = figure.subplots()
    for index, role in enumerate(dict.fromkeys(row["role"] for row in rows)):
        mine = [row for row in rows if row["role"] == role]
        tokens = [row["tokens"] for row in mine]
        per_seed = np.array([[float(v) for v in row["rmsd_A_per_seed"].split(", ")] for row in mine])
        mean = per_seed.mean(axis=1)
        error = np.stack([mean - per_seed.min(axis=1), per_seed.max(axis=1) - mean])
        axes.errorbar(tokens, mean, yerr=error, marker="o", capsize=3, color=f"C{index}",
                      label=f"{role} ({'nested dropout' if role == 'nested' else 'all tokens in training'})")
    axes.set(xscale="log", xlabel="tokens decoded (prefix length)", ylabel="Cα RMSD after alignment (Å)",
             title=f"Reconstruction against number of tokens, {seeds} seed(s)")
    tokens = sorted({row["tokens"] for row in rows})
    axes.set_xticks(tokens, [str(t) for t in tokens])
    axes.minorticks_off()  # the log axis's minor labels (3×10⁰, ...) would crowd the prefix lengths
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    return figure
