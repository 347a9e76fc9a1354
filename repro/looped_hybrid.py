"""Reproduction (small scale): a looped transformer recognizing Dyck-2 across string lengths, and hybrid
linear/full-attention stacks on 2-sequential function composition across table sizes.

Papers: Jerad, Svete, Hao, Cotterell, Merrill, "Context-free Recognition with Transformers" (arXiv 2601.01754)
and Liao, Wu, Lu, Ye, He, "A Provable Expressiveness Hierarchy in Hybrid Linear-Full Attention" (arXiv
2602.01763). See docs/papers/looped_cfl.md and docs/papers/hybrid_attention.md.

Dyck-2 (`configs/looped_dyck.py`): each `loops` variant of the looped model ("log2": T = ⌈log₂ T_row⌉ loops of
one tied layer, so longer rows get more loops; an integer: a fixed count) trains on strings of
n = budget.seq_len − padding − 1 brackets (objective "membership", near-miss negatives, chance 0.5), then is
evaluated, unchanged, on fresh strings of every length in `dyck_eval_lengths` with the same padding: accuracy
against length, inside and beyond the training length.

Function composition (`configs/hybrid_funccomp.py`): for each table size n in `funccomp_values` and each pattern
in `patterns` (e.g. "deltanet+attention", the layers' mixers joined by "+", repeated over four layers, or
"attention" for the all-softmax baseline), a model trains on rows of L (n + 1) + 2 tokens and reports its answer
accuracy on the validation split (chance 1/n): accuracy against sequence length as the table grows, the axis
along which the theory predicts hybrids with too few full-attention layers to fall behind.

Example::

    from icml26zoo import repro
    results = repro.run("looped_hybrid", "runs/looped_hybrid", budget="quick")   # QUICK with QUICK_ARGS
    print(results.markdown)
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.configs import hybrid_funccomp, looped_dyck
from icml26zoo.models import build_model
from icml26zoo.repro.common import Budget, Experiment, Results, line_figure
from icml26zoo.repro.registry import register_experiment
from icml26zoo.repro.stored import stored
from icml26zoo.train import load_run
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.data.formal_languages import Dyck, DyckOptions
from icml26zoo.train.loop import train
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "LOOPS", "PATTERNS", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

# budget.seq_len is the Dyck rows' length (string, padding, <cls>); function composition rows have their own.
QUICK = Budget(steps=12, batch_size=8, seq_len=13, seeds=(0,))
# The pages' run: three seeds (1,763 s of wall time for the 18 cells on the shared 2-core machine, 2026-12-06).
FULL = Budget(steps=400, batch_size=32, seq_len=25, seeds=(0, 1, 2))
LOOPS: tuple[int | str, ...] = ("log2", 1)
# A pattern names each layer's mixer, joined by "+" (a comma separates patterns on the command line; the model's
# own "deltanet,attention" form is accepted too).
PATTERNS = ("deltanet+attention", "attention")
DYCK_EVAL_LENGTHS = (8, 12, 16, 20, 24, 32)
FUNCCOMP_VALUES = (4, 8)
# The QUICK run (notebook, `--quick`): one cell per task (no prelude, a 2-layer hybrid), two evaluation lengths: the
# pipeline, at the least compile time (compiling dominates a QUICK run: XLA's cheap pipeline).
QUICK_ARGS = {"loops": ("log2",), "patterns": ("deltanet+attention",), "funccomp_values": (4,),
              "dyck_eval_lengths": (8, 12), "dyck_padding": 4, "prelude_layers": 0,
              "hybrid_layers": 2, "eval_examples": 64, "fast_compile": True}
# SMOKE: the QUICK looped cell and an all-attention 2-layer stack (the same experiment code as a mixed pattern, a
# third of its compile time) for 2 steps of 8 rows (a multiple of the devices), one Dyck length, 8 examples.
SMOKE = Budget(steps=2, batch_size=8, seq_len=13, seeds=(0,))
SMOKE_ARGS = QUICK_ARGS | {"patterns": ("attention",), "dyck_eval_lengths": (8,), "eval_examples": 8}
# accuracy: the mean over seeds; spread: max - min over seeds (0 with one seed).
COLUMNS = ("task", "model", "length", "row tokens", "loops", "accuracy", "spread", "chance")


@register_experiment("looped_hybrid", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/looped_cfl.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, loops: Sequence[int | str] = LOOPS,
        dyck_padding: int = 8, dyck_eval_lengths: Sequence[int] = DYCK_EVAL_LENGTHS, prelude_layers: int = 1,
        patterns: Sequence[str] = PATTERNS, funccomp_values: Sequence[int] = FUNCCOMP_VALUES,
        num_functions: int = 2, hybrid_layers: int = 4, eval_examples: int = 512, fast_compile: bool = False,
        resume: bool = False) -> Results:
    """Trains the Dyck-2 looped cells and the function-composition cells; writes the table and two figures.

    Args:
      run_dir: the experiment directory (cells, results.md/json, dyck_length.png, funccomp_length.png).
      budget: steps, batch size and seeds of every cell; seq_len sets the Dyck training rows (n + padding + 1).
      loops: the looped model's `loops` options to compare (an int >= 1 or "log2"/"linear").
      dyck_padding: `<pad>` tokens P per Dyck row (training and evaluation).
      dyck_eval_lengths: even string lengths (>= 4) at which each trained looped model is evaluated.
      prelude_layers: the looped model's untied layers before the loop.
      patterns: hybrid layer patterns, each the layers' mixer names joined by "+" (or ","); each pattern's
        length must divide `hybrid_layers`.
      funccomp_values: table sizes n (>= 2), one trained cell per pattern and n.
      num_functions: L, the functions composed.
      hybrid_layers: layers of every function-composition model (the pattern repeats over them).
      eval_examples: validation examples per Dyck length and per function-composition cell.
      fast_compile: compile with XLA's cheap pipeline (jax_disable_most_optimizations) for the whole run: faster
        compiles, slower steps, for tiny CPU runs where compiling dominates (restored afterwards).
      resume: reuse an existing run_dir's finished cells (FileNotFoundError if it does not exist).
    """
    dyck_train_length = budget.seq_len - dyck_padding - 1
    patterns = tuple(_model_pattern(pattern) for pattern in patterns)
    _check(loops, dyck_padding, prelude_layers, dyck_train_length, dyck_eval_lengths, patterns, funccomp_values,
           num_functions, hybrid_layers, eval_examples)
    check_bool("fast_compile", fast_compile)
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", fast_compile or previous)
    try:
        return _run(run_dir, budget, loops, dyck_padding, dyck_train_length, dyck_eval_lengths, prelude_layers,
                    patterns, funccomp_values, num_functions, hybrid_layers, eval_examples, resume)
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)


def _run(run_dir, budget, loops, dyck_padding, dyck_train_length, dyck_eval_lengths, prelude_layers, patterns,
         funccomp_values, num_functions, hybrid_layers, eval_examples, resume) -> Results:
    """`run` after its arguments are checked."""
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    rows, dyck_series, funccomp_series = [], {}, {}
    for loop in loops:
        accuracy = _dyck_cells(experiment, (("loops", loop), ("prelude_layers", prelude_layers)), dyck_train_length,
                               dyck_padding, dyck_eval_lengths, eval_examples)
        for length, values in accuracy.items():
            row_tokens = length + dyck_padding + 1
            rows.append({"task": "dyck-2", "model": f"looped loops={loop}", "length": length,
                         "row tokens": row_tokens, "loops": _loop_count(loop, row_tokens),
                         "accuracy": statistics.mean(values), "spread": max(values) - min(values), "chance": 0.5})
        dyck_series[f"loops={loop}"] = (list(accuracy), [statistics.mean(v) for v in accuracy.values()])
    for pattern in patterns:
        model = f"hybrid {pattern} x{hybrid_layers // _size(pattern)}"
        points = []
        for n in funccomp_values:
            values = [experiment.train_cell(f"funccomp_{pattern.replace(',', '-')}_n{n}_seed{seed}",
                                            _funccomp_config(experiment, pattern, n, num_functions, hybrid_layers,
                                                             eval_examples, seed))["eval/accuracy"]
                      for seed in budget.seeds]
            accuracy = statistics.mean(values)
            row_tokens = num_functions * (n + 1) + 2
            rows.append({"task": f"funccomp L={num_functions}", "model": model, "length": n,
                         "row tokens": row_tokens, "loops": None, "accuracy": accuracy,
                         "spread": max(values) - min(values), "chance": 1 / n})
            points.append((row_tokens, accuracy))
        funccomp_series[pattern] = ([p[0] for p in points], [p[1] for p in points])
    funccomp_series["chance (1/n)"] = (
        [num_functions * (n + 1) + 2 for n in funccomp_values], [1 / n for n in funccomp_values])
    figures = {
        "dyck_length": line_figure(dyck_series, xlabel="string length n (trained at "
                                   f"{dyck_train_length})", ylabel="accuracy", hlines={"chance": 0.5},
                                   title=f"Looped transformer on Dyck-2, {dyck_padding} padding tokens"),
        "funccomp_length": line_figure(funccomp_series, xlabel="tokens per row (table size n grows)",
                                       ylabel="answer accuracy",
                                       title=f"{num_functions}-sequential function composition"),
    }
    notes = [f"Dyck-2: trained on n = {dyck_train_length} brackets + {dyck_padding} pads + <cls>, evaluated on "
             f"{eval_examples} fresh strings per length (near-miss negatives, chance 0.5). Function composition: "
             f"one cell per pattern and table size n, answer accuracy on {eval_examples} validation examples. "
             f"Accuracy is the mean over seeds {budget.seeds}, spread the max - min over them."]
    title = "Looped transformer on Dyck-2 and hybrid stacks on function composition"
    return experiment.write(rows, columns=COLUMNS, title=title, notes=notes, figures=figures)


def _dyck_cells(experiment: Experiment, model_options: tuple, train_length: int, padding: int,
                eval_lengths: Sequence[int], eval_examples: int) -> dict[int, list[float]]:
    """Trains the looped model with `model_options` once per seed; its accuracy per evaluation length (one value
    per seed). A cell's accuracies are kept in its directory (keyed by the evaluation), so a resumed run reuses them
    after checking the cell's config."""
    loop = dict(model_options)["loops"]
    accuracy = {length: [] for length in eval_lengths}
    for seed in experiment.budget.seeds:
        cell = f"dyck_loops-{loop}_seed{seed}"
        config = _dyck_config(experiment, model_options, train_length, padding, eval_examples, seed)
        if (experiment.cell_dir(cell) / "summary.json").is_file():
            experiment.train_cell(cell, config)  # a finished cell: its stored config must match
        key = {"lengths": list(eval_lengths), "padding": padding, "examples": eval_examples}
        values = stored(experiment.cell_dir(cell) / "dyck_accuracy.json", key,
                        lambda cell=cell, config=config, seed=seed: _dyck_accuracies(
                            _trained_model(experiment, cell, config), eval_lengths, padding, eval_examples, seed))
        for length, value in zip(eval_lengths, values, strict=True):
            accuracy[length].append(value)
    return accuracy


def _dyck_accuracies(model: nnx.Module, lengths: Sequence[int], padding: int, examples: int, seed: int) -> list:
    return [dyck_accuracy(model, length, padding, examples, seed) for length in lengths]


def _trained_model(experiment: Experiment, cell: str, config: TrainConfig) -> nnx.Module:
    """The cell's trained model: a new cell trains and keeps its final parameters; a cell that has run before goes
    through `Experiment.train_cell` (which checks its stored config) and is reopened from its checkpoint."""
    workdir = experiment.cell_dir(cell)
    if (workdir / "config.json").is_file():
        experiment.train_cell(cell, config)
        return load_run(workdir)[1]
    params = train(config, workdir)["state"].params
    graphdef = nnx.split(nnx.eval_shape(lambda: build_model(config.model, rngs=nnx.Rngs(0))), nnx.Param)[0]
    return nnx.merge(graphdef, jax.device_get(params))


def dyck_accuracy(model: nnx.Module, length: int, padding: int, examples: int, seed: int) -> float:
    """Membership accuracy of `model` on `examples` fresh Dyck-2 strings of `length` (+ `padding` pads, <cls>).

    The strings come from the dataset's own generator with seed [seed, 2], apart from its train ([seed, 0])
    and validation ([seed, 1]) streams; the class is read at <cls> from output columns 0 / 1.
    """
    options = DyckOptions(length=length, padding=padding, num_types=2, train_examples=examples,
                          eval_examples=examples)
    rows, labels = Dyck.generate(options, examples, np.random.SeedSequence([seed, 2]))
    logits = _forward(model, jnp.asarray(rows[:, :-1]))
    predicted = np.asarray(jnp.argmax(logits[:, -1, :2], axis=-1))
    return float(np.mean(predicted == labels))


@nnx.jit
def _forward(model: nnx.Module, tokens: jax.Array) -> jax.Array:
    return model(tokens)


def _dyck_config(experiment: Experiment, model_options: tuple, length: int, padding: int, eval_examples: int,
                 seed: int) -> TrainConfig:
    preset = looped_dyck.get_config()
    task = (("length", length), ("padding", padding), ("num_types", 2),
            ("train_examples", _train_examples(experiment.budget, 8192)), ("eval_examples", eval_examples))
    model = dataclasses.replace(preset.model, model_options=model_options)
    data = dataclasses.replace(preset.data, task_options=task, data_dir=str(experiment.run_dir / "tfds"))
    config = dataclasses.replace(preset, model=model, data=data, eval_every=0)
    return experiment.cell_config(config, seed=seed, checkpoints=1)


def _funccomp_config(experiment: Experiment, pattern: str, n: int, num_functions: int, layers: int,
                     eval_examples: int, seed: int) -> TrainConfig:
    preset = hybrid_funccomp.get_config()
    task = (("num_values", n), ("num_functions", num_functions),
            ("train_examples", _train_examples(experiment.budget, 16384)), ("eval_examples", eval_examples))
    model = dataclasses.replace(preset.model, vocab_size=max(16, 2 + n + num_functions), num_layers=layers,
                                model_options=(("pattern", pattern),))
    data = dataclasses.replace(preset.data, task_options=task, data_dir=str(experiment.run_dir / "tfds"))
    config = dataclasses.replace(preset, model=model, data=data, eval_every=0)
    config = experiment.cell_config(config, seed=seed, checkpoints=1)
    return dataclasses.replace(config, seq_len=num_functions * (n + 1) + 2)


def _train_examples(budget: Budget, most: int) -> int:
    """Training examples to generate: what the budget reads (at least 256), at most `most` (then epochs repeat)."""
    return min(most, max(256, budget.steps * budget.batch_size))


def _loop_count(loop: int | str, row_tokens: int) -> int:
    from icml26zoo.models.looped import LoopedOptions

    return LoopedOptions(loops=loop).num_loops(row_tokens)


def _size(pattern: str) -> int:
    return len(pattern.split(","))


def _model_pattern(pattern: str) -> str:
    """The hybrid model's form of `pattern`: mixer names joined by commas ("deltanet+attention" becomes
    "deltanet,attention")."""
    if not isinstance(pattern, str):
        raise ValueError(f"patterns[i] must be mixer names joined by '+', got {pattern!r}")
    return ",".join(name.strip() for name in pattern.replace("+", ",").split(","))


def _check(loops, padding, prelude_layers, train_length, eval_lengths, patterns, values, num_functions, layers,
           eval_examples) -> None:
    from icml26zoo.models.hybrid import HybridOptions
    from icml26zoo.models.looped import LoopedOptions

    if not loops or not patterns or not eval_lengths or not values:
        raise ValueError("loops, patterns, dyck_eval_lengths and funccomp_values must each hold at least one value")
    for loop in loops:
        LoopedOptions(loops=loop)
    check_int("dyck_padding", padding, minimum=0)
    check_int("prelude_layers", prelude_layers, minimum=0)
    if train_length < 4 or train_length % 2:
        raise ValueError(f"budget.seq_len - dyck_padding - 1 (the Dyck training length) must be even and >= 4, "
                         f"got {train_length}")
    for length in eval_lengths:
        check_int("dyck_eval_lengths[i]", length, minimum=4)
        if length % 2:
            raise ValueError(f"dyck_eval_lengths[i] must be even (Dyck strings), got {length}")
    check_int("hybrid_layers", layers)
    for pattern in patterns:
        try:
            names = HybridOptions(pattern=pattern).mixers()
        except ValueError as error:
            raise ValueError(f"patterns[i]: {error}") from None
        if layers % len(names):
            raise ValueError(f"patterns[i] must have a number of mixers dividing hybrid_layers = {layers}, "
                             f"got {pattern!r}")
    for n in values:
        check_int("funccomp_values[i]", n, minimum=2)
    check_int("num_functions", num_functions)
    check_int("eval_examples", eval_examples, minimum=2)
