"""Reproduction: YAQA (Kronecker-factored KL Hessian) vs GPTQ / LDLQ (layer proxy) vs round-to-nearest.

Paper: Tseng, Sun, De Sa, "Model-Preserving Adaptive Rounding" (ICML 2026, arXiv 2505.22988); see
docs/papers/yaqa.md and `icml26zoo.quant`.

A tiny attention LM (the 2-layer tiny llama preset, byte corpus) is trained with the shared trainer, reopened,
and every mixer / MLP linear layer is rounded to `bits` by each method onto the same per-row uniform grid:
RTN; GPTQ and LDLQ with H_in = E[x xᵀ] of `calibration_batches` training batches; YAQA's two-sided rounding
with Sketch A ("yaqa_a": per-token nearest Kronecker product, 6 power steps) or Sketch B ("yaqa_b": per-sequence
gradients) of the full-model KL Hessian (model-sampled targets) on the same batches. The table reports the mean
per-token KL(p_orig ‖ p_quantized) and the quantized model's cross-entropy on `eval_batches` held-out batches.
The paper predicts KL(YAQA) < KL(GPTQ) ≈ KL(LDLQ) < KL(RTN), most clearly at 2-3 bits.

Example::

    from icml26zoo import repro
    results = repro.run("yaqa", "runs/yaqa", budget="quick")
    print(results.markdown)

From a shell: `python -m icml26zoo.repro yaqa [--smoke | --quick] --out DIR [methods=rtn,yaqa_b] [bits=2,3]
[calibration_batches=32] [eval_batches=8] [d_model=64]`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import statistics
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from icml26zoo.quant import check_bits, input_moments, kl_sketch_a, kl_sketch_b, output_kl, quantize_model
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, line_figure
from icml26zoo.repro.registry import register_experiment
from icml26zoo.train import load_run
from icml26zoo.train.data import make_eval_iterator, make_train_iterator
from icml26zoo.train.presets import tiny_byte_lm
from icml26zoo.validation import check_int

__all__ = ["BITS", "FULL", "METHODS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=20, batch_size=4, seq_len=32, seeds=(0,))
FULL = Budget(steps=400, batch_size=16, seq_len=64, seeds=(0,))
QUICK_ARGS = {"bits": (2,), "calibration_batches": 2, "eval_batches": 2}
# Every kind of Hessian at the smallest size (none: RTN; input moments: GPTQ; the KL sketch: YAQA-A; LDLQ shares
# GPTQ's moments, and sketch B's compile alone costs more than the rest: tests/zoo/test_quant.py covers both), a
# 16-wide LM trained 2 steps of 2 rows of 16 bytes, quantized to 2 bits with one calibration batch, scored on one
# held-out batch.
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"methods": ("rtn", "gptq", "yaqa_a"), "bits": (2,), "calibration_batches": 1, "eval_batches": 1,
              "d_model": 16}
BITS = (2, 3, 4)
# Each compared method: the rounding algorithm of `icml26zoo.quant` it uses.
ROUNDING = {"rtn": "rtn", "gptq": "gptq", "ldlq": "ldlq", "yaqa_a": "yaqa", "yaqa_b": "yaqa"}
METHODS = tuple(ROUNDING)


@register_experiment("yaqa", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS, quick_args=QUICK_ARGS,
                     page="docs/papers/yaqa.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, methods: Sequence[str] = METHODS,
        bits: Sequence[int] = BITS, calibration_batches: int = 16, eval_batches: int = 8, d_model: int = 64,
        resume: bool = False) -> Results:
    """Trains the tiny LM once per seed, quantizes it by every method at every bit width, writes the KL table.

    Args:
      run_dir: the experiment's directory (cells, the byte corpus, results.md/json, kl_vs_bits.png).
      budget: steps, batch size, sequence length and seeds of the trained LMs.
      methods: from METHODS ("rtn", "gptq", "ldlq", "yaqa_a", "yaqa_b").
      bits: bit widths, each 2, 3 or 4.
      calibration_batches: training batches (budget.batch_size rows) for the Hessians (>= 1).
      eval_batches: held-out batches for the KL (>= 1).
      d_model: the LM's width (the tiny preset's is 64).
      resume: require run_dir to exist; finished training cells and their stored scores are reused either way.
    """
    methods = check_names("methods", methods, METHODS)
    bits = tuple(bits)
    if not bits or len(set(bits)) != len(bits):
        raise ValueError(f"bits must be distinct widths from {list(BITS)}, got {list(bits)}")
    bits = tuple(check_bits(b) for b in bits)
    check_int("calibration_batches", calibration_batches)
    check_int("eval_batches", eval_batches)
    check_int("d_model", d_model, minimum=8)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    config = _config(experiment, d_model)
    devices = jax.devices()[:1]
    kl: dict[tuple[str, int], list[float]] = {}
    loss: dict[tuple[str, int] | str, list[float]] = {}
    for seed in budget.seeds:
        cell = f"lm_seed{seed}"
        experiment.train_cell(cell, experiment.cell_config(config, seed=seed), devices=devices, final_eval=False)
        scores = _scores(experiment, cell, seed, methods, bits, calibration_batches, eval_batches, devices)
        loss.setdefault("float32", []).append(scores["float32"])
        for method, width in itertools.product(methods, bits):
            kl.setdefault((method, width), []).append(scores[f"{method}@{width}"]["kl"])
            loss.setdefault((method, width), []).append(scores[f"{method}@{width}"]["loss"])
    rows = [_row(method, width, kl[(method, width)], loss[(method, width)]) for width in bits for method in methods]
    rows.append({"method": "float32", "bits": 32, "kl": 0.0, "kl_spread": None,
                 "eval_loss": statistics.fmean(loss["float32"])})
    figure = line_figure({m: (list(bits), [statistics.fmean(kl[(m, b)]) for b in bits]) for m in methods},
                         xlabel="bits per weight", ylabel="KL(original ‖ quantized), nats/token", logy=True,
                         title="Output KL of the quantized tiny LM")
    return experiment.write(rows, columns=("method", "bits", "kl", "kl_spread", "eval_loss"),
                            title="YAQA vs GPTQ/LDLQ vs RTN: output KL of a quantized tiny LM",
                            notes=_notes(budget, d_model, calibration_batches, eval_batches),
                            figures={"kl_vs_bits": figure},
                            extra={"kl_per_seed": {f"{m}@{b}": v for (m, b), v in kl.items()}})


def _scores(experiment: Experiment, cell: str, seed: int, methods: Sequence[str], bits: Sequence[int],
            calibration_batches: int, eval_batches: int, devices: list) -> dict:
    """{"float32": eval loss, "<method>@<bits>": {"kl", "loss"}} of the trained cell `cell`.

    Scores are stored in the cell (quantized.json, under the calibration and eval sizes) and read back on a rerun;
    only the missing ones are computed (each method's Hessians are drawn from the seed alone, so a score does not
    depend on which other methods run with it)."""
    path = experiment.cell_dir(cell) / "quantized.json"
    sizes = f"calibration{calibration_batches}_eval{eval_batches}"
    stored = json.loads(path.read_text()) if path.is_file() else {}
    scores = dict(stored.get(sizes, {}))
    missing = [(m, b) for m, b in itertools.product(methods, bits) if f"{m}@{b}" not in scores]
    if missing or "float32" not in scores:
        budget = experiment.budget
        cell_config, model, _ = load_run(experiment.cell_dir(cell), devices=devices)
        calibration = _take(make_train_iterator(cell_config.data, batch_size=budget.batch_size,
                                                seq_len=budget.seq_len, seed=seed + 7919), calibration_batches)
        held_out = _take(make_eval_iterator(cell_config.data, batch_size=budget.batch_size,
                                            seq_len=budget.seq_len), eval_batches)
        hessians = _hessians(model, calibration, [m for m, _ in missing], seed)
        scores["float32"] = cross_entropy(model, held_out)
        for method, width in missing:
            quantized = quantize_model(model, ROUNDING[method], width, hessians.get(method))
            scores[f"{method}@{width}"] = {"kl": output_kl(model, quantized, held_out),
                                           "loss": cross_entropy(quantized, held_out)}
        path.write_text(json.dumps(stored | {sizes: scores}, indent=1) + "\n")
    return scores


@nnx.jit
def _loss_sums(net: nnx.Module, batch: dict) -> tuple[jax.Array, jax.Array]:
    logits = net(batch["inputs"], segment_ids=batch["segment_ids"])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    return jnp.sum(losses * batch["weights"]), jnp.sum(batch["weights"])


def cross_entropy(model: nnx.Module, batches: Sequence[dict]) -> float:
    """Mean next-token cross-entropy (nats) of `model` over the weighted targets of `batches` (one compiled
    program for every model of one shape)."""
    totals = [_loss_sums(model, batch) for batch in batches]
    return float(sum(t for t, _ in totals)) / max(float(sum(w for _, w in totals)), 1e-9)


def _hessians(model: nnx.Module, calibration: list[dict], methods: Sequence[str], seed: int) -> dict:
    hessians = {}
    if {"gptq", "ldlq"} & set(methods):
        moments = input_moments(model, calibration)
        hessians.update({"gptq": moments, "ldlq": moments})
    if "yaqa_a" in methods:
        hessians["yaqa_a"] = kl_sketch_a(model, calibration, jax.random.key(seed))
    if "yaqa_b" in methods:
        hessians["yaqa_b"] = kl_sketch_b(model, calibration, jax.random.key(seed))
    return hessians


def _take(iterator, count: int) -> list[dict]:
    return [{k: jnp.asarray(v) for k, v in batch.items()} for batch in itertools.islice(iterator, count)]


def _config(experiment: Experiment, d_model: int):
    config = tiny_byte_lm("attention")
    data = dataclasses.replace(config.data, data_dir=str(experiment.run_dir / "tfds"))
    model = dataclasses.replace(config.model, d_model=d_model, max_seq_len=max(64, experiment.budget.seq_len))
    steps = experiment.budget.steps
    optim = dataclasses.replace(config.optim, warmup_steps=max(1, steps // 10))
    return dataclasses.replace(config, model=model, data=data, optim=optim, eval_every=0, eval_batches=4,
                               log_every=max(1, steps // 20))


def _row(method: str, width: int, kls: list[float], losses: list[float]) -> dict:
    return {"method": method, "bits": width, "kl": statistics.fmean(kls),
            "kl_spread": (max(kls) - min(kls)) / 2 if len(kls) > 1 else None,
            "eval_loss": statistics.fmean(losses) if all(math.isfinite(v) for v in losses) else math.nan}


def _notes(budget: Budget, d_model: int, calibration_batches: int, eval_batches: int) -> list[str]:
    return [
        f"Model: the tiny 2-layer attention LM (d_model {d_model}, 4 heads / 2 KV heads, SwiGLU) trained on the "
        "byte corpus (pystdlib); all 14 mixer/MLP linear layers quantized; embeddings, norms and head in float32.",
        f"Hessians from {calibration_batches} training batches of {budget.batch_size} x {budget.seq_len} tokens; "
        f"KL and eval_loss (nats/token) on {eval_batches} held-out batches. Grid: symmetric uniform per output "
        "row, step chosen by round-to-nearest MSE, the same for every method. No Hadamard incoherence processing.",
        "kl_spread: half the range over seeds (one seed: -).",
    ]
