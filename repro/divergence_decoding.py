"""Reproduction: Divergence Decoding unlearns a forget set of synthetic facts at inference time, and distils.

Paper: Merchant, Levy, "Divergence Decoding: Inference-Time Unlearning via Auxiliary Models" (ICML 2026,
arXiv 2605.31293). See docs/papers/divergence_decoding.md.

The benchmark (`repro/divergence_decoding_parts.py`): a generated corpus of "name:attribute" facts, a fraction
of them the forget set. With the shared trainer it trains the base model (attention LM, 2 layers, d_model 64)
on all facts, the retain auxiliary (2 layers, d_model 32) on the retain facts only, and the forget auxiliary
(the same small model) on all facts, as the paper's TOFU setup does (`forget_aux_data="all"`); the variant
`"forget"` trains the forget auxiliary on the forget facts only. It then scores every fact's answer
("<attribute>\\n" after "\\n<name>:") under the base model and under the steered logits
z_base + α (z_retain − z_forget) for each α: the teacher-forced negative log-likelihood per answer character,
the probability of the whole answer, and the greedy answer accuracy of the cached decoding loop. Finally it
distils the steered distribution at `distill_alpha` into a copy of the base model (KL on the forget facts'
answer characters, prompt masked, `distill_steps` full-batch Adam steps) and scores the distilled model.

Example::

    python -m icml26zoo.repro divergence_decoding --quick --out runs/dd

    from icml26zoo import repro
    results = repro.run("divergence_decoding", "runs/dd", budget="quick")
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.decode.divergence import DivergenceDecoding, steered_logits
from icml26zoo.repro.common import Budget, Experiment, Results, check_names, markdown_table
from icml26zoo.repro.divergence_decoding_parts import (
    SCORES,
    VOCAB_SIZE,
    FactCorpus,
    answer_accuracy,
    answer_arrays,
    distill,
    fact_batches,
    make_corpus,
    score_answers,
    seed_means,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import OptimConfig, TrainConfig
from icml26zoo.train.loop import train
from icml26zoo.train.presets import tiny_model
from icml26zoo.train.runs import build_train_model
from icml26zoo.validation import check_int, check_positive

__all__ = ["ALPHAS", "FORGET_AUX_DATA", "FULL", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

QUICK = Budget(steps=30, batch_size=8, seq_len=32, seeds=(0,))
FULL = Budget(steps=400, batch_size=32, seq_len=48, seeds=(0, 1, 2))
# The QUICK run (notebook, --quick): a small corpus, two alphas, a few distillation steps: the pipeline, not
# a result (30 steps memorize nothing).
QUICK_ARGS = {"num_facts": 40, "alphas": (1.0, 2.0), "distill_steps": 5, "forget_aux_data": ("all",), "base_layers": 1,
              "aux_layers": 1}
# Every stage (three trained models, steered scoring and decoding, distillation) at the smallest size.
SMOKE = Budget(steps=2, batch_size=2, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"num_facts": 10, "alphas": (1.0,), "distill_steps": 1, "forget_aux_data": ("all",), "base_layers": 1,
              "aux_layers": 1, "aux_d_model": 16}
# The paper's sweep range, with its TOFU default 1.5 among them.
ALPHAS = (0.5, 1.0, 1.5, 2.0, 3.0)
FORGET_AUX_DATA = ("all", "forget")
LEARNING_RATE = 3e-3
AUX_D_MODEL = 32
# Compiled once per model structure (the models are arguments, not closed over): every alpha, seed and the
# distilled model reuse them.
_forward = jax.jit(lambda model, tokens: model(tokens))
_steered = jax.jit(steered_logits)


@register_experiment("divergence_decoding", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/divergence_decoding.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, num_facts: int = 200, forget_fraction: float = 0.1,
        alphas: Sequence[float] = ALPHAS, distill_alpha: float = 1.5, distill_steps: int = 100,
        distill_learning_rate: float = 1e-3, forget_aux_data: Sequence[str] = FORGET_AUX_DATA,
        base_layers: int = 2, aux_layers: int = 2, aux_d_model: int = AUX_D_MODEL, resume: bool = False) -> Results:
    """Trains the three models per seed, scores base / steered / distilled, and writes the table and figure.

    Args:
      run_dir: the experiment's directory (cells, results.md/json, likelihood.png).
      budget: trainer steps, batch size, row length and seeds for every model.
      num_facts: facts in the corpus (>= 10); forget_fraction of them (in (0, 1)) are the forget set.
      alphas: steering strengths α > 0 to score (distinct).
      distill_alpha: the α whose steered distribution is distilled into the base model (> 0).
      distill_steps: full-batch Adam steps of the distillation (>= 1), at distill_learning_rate (> 0).
      forget_aux_data: which data the forget auxiliary sees, from FORGET_AUX_DATA: "all" (the paper) and/or
        "forget" (the forget facts only); one forget auxiliary is trained per entry.
      base_layers, aux_layers: depth of the base model (d_model 64) and of the auxiliaries.
      aux_d_model: width of the auxiliaries (default 32, half the base model's).
      resume: require run_dir to exist; finished cells are reused either way.
    """
    check_int("num_facts", num_facts, minimum=10)
    alphas = _check_alphas(alphas)
    check_positive("distill_alpha", distill_alpha, finite=True)
    check_int("distill_steps", distill_steps)
    check_int("base_layers", base_layers)
    check_int("aux_layers", aux_layers)
    check_int("aux_d_model", aux_d_model, minimum=2)
    check_positive("distill_learning_rate", distill_learning_rate, finite=True)
    forget_aux_data = check_names("forget_aux_data", forget_aux_data, FORGET_AUX_DATA)
    corpus = make_corpus(num_facts, forget_fraction, seed=0)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rows, curves, extra = [], {}, {"distillation_loss": {}}
    options = {"num_facts": num_facts, "forget_fraction": forget_fraction, "alphas": alphas,
               "distill_alpha": distill_alpha, "distill_steps": distill_steps,
               "distill_learning_rate": distill_learning_rate, "forget_aux_data": forget_aux_data,
               "base_layers": base_layers, "aux_layers": aux_layers, "aux_d_model": aux_d_model}
    for seed in budget.seeds:
        def measure(seed: int = seed) -> dict:
            return _seed_rows(experiment, corpus, seed, alphas=alphas, distill_alpha=distill_alpha,
                              distill_steps=distill_steps, distill_learning_rate=distill_learning_rate,
                              forget_aux_data=forget_aux_data, base_layers=base_layers, aux_layers=aux_layers,
                              aux_d_model=aux_d_model)

        # The seed's scores, kept in the run directory: a resumed run reuses them as it reuses finished cells.
        result = stored(experiment.run_dir / f"scores_seed{seed}.json", options, measure)
        rows += result["rows"]
        extra["distillation_loss"].update(result["distillation_loss"])
        for data in forget_aux_data:
            curves[data] = [r for r in result["rows"]
                            if r["forget_aux_data"] in (data, "-") and r["model"] != "distilled"]
    means = seed_means(rows)
    extra["seed_means"] = means
    mean_columns = ("model", "forget_aux_data", "alpha", "seeds",
                    *(f"{score}{suffix}" for score in SCORES for suffix in ("", "_spread")))
    notes = _notes(corpus, base_layers, aux_layers, aux_d_model, distill_alpha, distill_steps, distill_learning_rate)
    notes += ["", "Mean over seeds (*_spread = max - min over seeds):", "", *markdown_table(means, mean_columns), "",
              "Every seed's rows:"]
    return experiment.write(
        rows, columns=("model", "forget_aux_data", "alpha", "seed", "forget_nll", "retain_nll", "forget_answer_prob",
                       "retain_answer_prob", "forget_accuracy", "retain_accuracy"),
        title="Divergence Decoding on synthetic name:attribute facts (forget vs retain set)",
        notes=notes, figures={"likelihood": _figure(curves, rows)}, extra=extra)


def _seed_rows(experiment: Experiment, corpus: FactCorpus, seed: int, *, alphas: Sequence[float],
               distill_alpha: float, distill_steps: int, distill_learning_rate: float,
               forget_aux_data: Sequence[str], base_layers: int, aux_layers: int, aux_d_model: int) -> dict:
    """Trains (or reuses) the seed's three models, scores base, steered and distilled: {"rows", "distillation_loss"}."""
    rows, losses_by_data = [], {}
    base = _train(experiment, "base", corpus.all, seed, d_model=64, layers=base_layers)
    retain = _train(experiment, "retain_aux", corpus.retain, seed, d_model=aux_d_model, layers=aux_layers)
    rows.append(_row("base", "-", 0.0, corpus, base, None, seed))
    for data in forget_aux_data:
        forget = _train(experiment, f"forget_aux_{data}", corpus.all if data == "all" else corpus.forget, seed,
                        d_model=aux_d_model, layers=aux_layers)
        for alpha in alphas:
            processor = DivergenceDecoding(base, retain, forget, alpha=alpha)
            rows.append(_row("divergence decoding", data, alpha, corpus, base, processor, seed))
        distilled, losses = _distill(base, DivergenceDecoding(base, retain, forget, alpha=distill_alpha),
                                     corpus, steps=distill_steps, learning_rate=distill_learning_rate)
        rows.append(_row("distilled", data, distill_alpha, corpus, distilled, None, seed))
        losses_by_data[f"{data}_seed{seed}"] = losses
    return {"rows": rows, "distillation_loss": losses_by_data}


def _distill(base: nnx.Module, processor: DivergenceDecoding, corpus: FactCorpus, *, steps: int,
             learning_rate: float) -> tuple[nnx.Module, list[float]]:
    """The base model distilled towards the steered logits on the forget facts' answers (prompt masked)."""
    tokens, mask = answer_arrays(corpus.all)
    # Teacher logits over all facts (the shape scoring compiled), then the forget rows (they come first).
    teacher = _steered(base, processor, jnp.asarray(tokens))
    forget = slice(0, len(corpus.forget))
    return distill(base, tokens[forget], mask[forget], teacher[forget], steps=steps, learning_rate=learning_rate)


def _check_alphas(alphas: Sequence[float]) -> tuple[float, ...]:
    values = tuple(alphas)
    if not values:
        raise ValueError("alphas must hold at least one steering strength > 0, got none")
    for value in values:
        check_positive("alphas[i]", value, finite=True)
    if len(set(values)) != len(values):
        raise ValueError(f"alphas must not repeat a value, got {list(values)}")
    return tuple(float(v) for v in values)


def cell_config(experiment: Experiment, seed: int, *, d_model: int, layers: int) -> TrainConfig:
    """The trainer config of one model: an attention LM (`layers` deep, d_model wide) over the fact characters."""
    budget = experiment.budget
    model = dataclasses.replace(tiny_model("attention", vocab_size=VOCAB_SIZE, max_seq_len=budget.seq_len),
                                d_model=d_model, num_layers=layers)
    optim = OptimConfig(learning_rate=LEARNING_RATE, warmup_steps=min(20, budget.steps // 10))
    config = TrainConfig(model=model, optim=optim, log_every=max(1, budget.steps // 20), eval_every=0,
                         eval_batches=0, sample_length=0)
    return experiment.cell_config(config, seed=seed, checkpoints=1)


def _train(experiment: Experiment, name: str, facts: Sequence[tuple[str, str]], seed: int, *,
           d_model: int, layers: int) -> nnx.Module:
    """Trains (or reuses) cell `<name>_seed<seed>` on batches of `facts`; returns the trained model."""
    cell = f"{name}_seed{seed}"
    config = cell_config(experiment, seed, d_model=d_model, layers=layers)
    budget = experiment.budget
    # A fixed stream per cell (the seed and the model name), replayable for a resumed run.
    stream_seed = seed * 1000 + sum(map(ord, name))
    data = _Replayable(facts, budget.batch_size, budget.seq_len, stream_seed, budget.steps)
    devices = jax.devices()[:1]
    workdir = experiment.cell_dir(cell)
    if (workdir / "config.json").is_file():
        # A finished cell is read back, an interrupted one resumes; a different config is an error.
        experiment.train_cell(cell, config, data=data, devices=devices)
        return load_run(workdir, devices=devices)[1]
    # A fresh cell: the final state comes back from the trainer, so nothing is rebuilt or restored.
    state = train(config, workdir, data=data, devices=devices)["state"]
    graphdef = nnx.split(nnx.eval_shape(lambda: build_train_model(config)), nnx.Param)[0]
    return nnx.merge(graphdef, jax.device_get(state.params))


@dataclasses.dataclass(frozen=True)
class _Replayable:
    """The trainer's `data=`: iterating starts the same batch stream from its beginning."""

    facts: Sequence[tuple[str, str]]
    batch_size: int
    seq_len: int
    seed: int
    steps: int

    def __iter__(self):
        return fact_batches(self.facts, batch_size=self.batch_size, seq_len=self.seq_len, seed=self.seed,
                            steps=self.steps)


def _row(model_name: str, data: str, alpha: float, corpus: FactCorpus, model: nnx.Module,
         processor: DivergenceDecoding | None, seed: int) -> dict:
    if processor is None:
        def logits_fn(tokens):
            return _forward(model, tokens)
    else:
        def logits_fn(tokens):
            return _steered(model, processor, tokens)
    # Both sets in one batch (one compiled shape), split afterwards.
    scores = score_answers(logits_fn, corpus.all, groups=(len(corpus.forget), len(corpus.retain)))
    accuracy = answer_accuracy(model, corpus.all, processor=processor, groups=(len(corpus.forget),
                                                                              len(corpus.retain)))
    forget, retain = scores
    return {
        "model": model_name, "forget_aux_data": data, "alpha": alpha, "seed": seed,
        "forget_nll": forget.nll, "retain_nll": retain.nll,
        "forget_answer_prob": forget.answer_probability, "retain_answer_prob": retain.answer_probability,
        "forget_accuracy": accuracy[0], "retain_accuracy": accuracy[1],
    }


def _figure(curves: dict, rows: list[dict]):
    """Forget- (solid) and retain-set (dashed) NLL against α (α = 0 is the base model), log scale, one colour per
    forget-auxiliary variant; the distilled models as markers (x forget set, + retain set) at their α."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for index, (data, curve) in enumerate(curves.items()):
        color = f"C{index}"
        alphas = [r["alpha"] for r in curve]
        axes.plot(alphas, [r["forget_nll"] for r in curve], color=color, marker="o", markersize=3,
                  label=f"forget set (forget aux: {data})")
        axes.plot(alphas, [r["retain_nll"] for r in curve], color=color, marker="o", markersize=3, linestyle="--",
                  label=f"retain set (forget aux: {data})")
        for row in rows:
            if row["model"] == "distilled" and row["forget_aux_data"] == data:
                axes.scatter([row["alpha"]], [row["forget_nll"]], color=color, marker="x", s=70,
                             label=f"distilled, forget set (aux: {data})")
                axes.scatter([row["alpha"]], [row["retain_nll"]], color=color, marker="+", s=90,
                             label=f"distilled, retain set (aux: {data})")
    axes.set(xlabel="alpha (0 = base model)", ylabel="NLL per answer character (nats)", yscale="log",
             title="Divergence Decoding: answer likelihood on forget vs retain facts")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return figure


def _notes(corpus: FactCorpus, base_layers: int, aux_layers: int, aux_d_model: int, distill_alpha: float,
           distill_steps: int, learning_rate: float) -> list[str]:
    return [
        f"Corpus: {len(corpus.all)} facts \"\\n<name>:<attribute>\" (5-letter names, 16 attributes), "
        f"{len(corpus.forget)} in the forget set. Base: {base_layers}-layer attention LM, d_model 64, trained on "
        f"all facts; auxiliaries: {aux_layers} layers, d_model {aux_d_model}; retain aux on the retain facts, "
        "forget aux on all facts "
        "(forget_aux_data = all, the paper's setup) or on the forget facts only (= forget). All with the shared "
        f"trainer, AdamW at {LEARNING_RATE:g}, character vocabulary {VOCAB_SIZE}.",
        "forget_nll / retain_nll: teacher-forced NLL per answer character (attribute + newline after "
        "\"\\n<name>:\"), nats; *_answer_prob: mean probability of the whole answer; *_accuracy: greedy decoding "
        "(cached loop, steered when alpha > 0) writes the right attribute.",
        f"distilled: the base model after {distill_steps} full-batch Adam steps (lr {learning_rate:g}) of "
        f"KL(steered at alpha {distill_alpha:g} || student) on the forget facts' answer characters only.",
    ]
