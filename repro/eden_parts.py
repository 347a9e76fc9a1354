"""The EDEN reproduction's measurements: motif completion by greedy decoding, power-law fits, its figures.

Motif completion: a prompt is a validation sequence cut `prefix` bases into a planted motif that lies wholly
inside the model's input row. The model continues it greedily (argmax over the four bases, its own
predictions fed back) for the motif's remaining L − prefix bases, and is scored against the motif's
canonical content (the generator mutates each planted base with probability 0.05; the completion asked for
is the motif itself). The generator's own greedy continuation (`next_base_probabilities` of the true HMM)
is the reference: it is the best a model can do with the same context.

Scaling: per architecture, the reducible loss (eval bits/base minus the Bayes-optimal bits of the same eval
rows) against non-embedding parameters is fitted with a straight line in log-log space, every (size, seed)
cell one point, so loss − E = A · N^(−alpha); alpha's uncertainty is the least-squares standard error of the
slope. The raw loss (no floor) is fitted the same way for comparison.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence

import jax
import numpy as np
import scipy.stats
from flax import nnx
from matplotlib.figure import Figure

from icml26zoo.train.data import nucleotide, nucleotide_hmm

# The byte tokens of A, C, G, T: a base code c is the model's token BASE_TOKENS[c].
BASE_TOKENS = nucleotide.ASCII_CODES.astype(np.int32)
Predict = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class MotifPrompts:
    """Prompts cut inside planted motifs: P rows of the model's input and what each must complete.

    codes [P, T] base codes of the row (the model sees T = seq_len tokens); cut [P] the first position to
    fill (motif start + prefix); target [P, L − prefix] the motif's canonical remaining bases; paired [P]
    whether the motif is a second arm whose first arm is in the row (see `nucleotide.motif_occurrences`).
    """

    codes: np.ndarray
    cut: np.ndarray
    target: np.ndarray
    paired: np.ndarray


def motif_prompts(split: Mapping[str, np.ndarray], spec: nucleotide_hmm.HmmSpec, *, seq_len: int,
                  prefix: int) -> MotifPrompts:
    """The prompts of a split (`nucleotide.generate_split`): every motif wholly inside the first `seq_len`
    bases of its sequence, cut after its first `prefix` bases."""
    window = {name: np.asarray(split[name])[:, :seq_len] for name in ("codes", "variant", "offset")}
    found = nucleotide.motif_occurrences(window["variant"], window["offset"], spec.motif_length, spec.num_motifs)
    if not found["row"].size:
        raise ValueError(f"seq_len={seq_len} leaves no planted motif wholly inside a row; expected a seq_len of "
                         f"a few motif lengths (L = {spec.motif_length})")
    target = spec.variants[found["variant"]][:, prefix:]
    return MotifPrompts(codes=window["codes"][found["row"]].astype(np.int64), cut=found["start"] + prefix,
                        target=target, paired=found["paired"])


def greedy_completion(predict: Predict, prompts: MotifPrompts) -> np.ndarray:
    """[P, L − prefix] base codes continued greedily from each prompt.

    `predict(codes [P, T]) -> scores [P, T, 4]`: row t scores the base at t + 1 from the bases up to t (a
    causal predictor, so the bases after the cut, still the original ones, never leak into the scores).
    """
    codes, rows = prompts.codes.copy(), np.arange(prompts.codes.shape[0])
    steps = prompts.target.shape[1]
    completion = np.empty((rows.size, steps), np.int64)
    for step in range(steps):
        position = prompts.cut + step
        completion[:, step] = np.argmax(predict(codes)[rows, position - 1], axis=-1)
        codes[rows, position] = completion[:, step]
    return completion


def completion_accuracy(completion: np.ndarray, prompts: MotifPrompts) -> dict[str, float]:
    """Per-base accuracy of a completion against the canonical motifs: all prompts, and the paired second
    arms only (None when the rows hold none)."""
    correct = completion == prompts.target
    paired = float(correct[prompts.paired].mean()) if prompts.paired.any() else None
    return {"motif_acc": float(correct.mean()), "paired_acc": paired}


def generator_predict(spec: nucleotide_hmm.HmmSpec) -> Predict:
    """The true generator as a `greedy_completion` predictor (its exact next-base probabilities)."""
    return lambda codes: nucleotide_hmm.next_base_probabilities(spec, codes)[:, 1:]


def model_predict(model: nnx.Module) -> Predict:
    """A trained LM as a `greedy_completion` predictor: its logits restricted to the four base tokens."""
    graphdef, state = nnx.split(model)
    return lambda codes: np.asarray(_base_logits(graphdef, state, BASE_TOKENS[codes]))


@functools.partial(jax.jit, static_argnums=0)
def _base_logits(graphdef: nnx.GraphDef, state: nnx.State, tokens: jax.Array) -> jax.Array:
    """tokens [P, T] -> logits [P, T, 4] of the base tokens (one compile per architecture and size)."""
    return nnx.merge(graphdef, state)(tokens)[..., BASE_TOKENS]


def power_law_fit(params: Sequence[float], losses: Sequence[float], floor: float = 0.0) -> dict[str, float | None]:
    """Least-squares fit of log(loss − floor) = log A − alpha · log N over the points (N_i, loss_i).

    Returns alpha, its standard error (None with fewer than 3 points, where no residual is left), A and the
    number of points; every entry None when the points span fewer than 2 sizes or a loss is not above
    `floor` (no logarithm).
    """
    x, y = np.log(np.asarray(params, np.float64)), np.asarray(losses, np.float64) - floor
    empty = {"alpha": None, "alpha_se": None, "coefficient": None, "points": int(x.size)}
    if np.unique(x).size < 2 or (y <= 0).any():
        return empty
    fit = scipy.stats.linregress(x, np.log(y))
    error = float(fit.stderr) if x.size > 2 else None
    return {"alpha": -float(fit.slope), "alpha_se": error, "coefficient": math.exp(fit.intercept),
            "points": int(x.size)}


def scaling_figure(points: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                   fits: Mapping[str, Mapping[str, float | None]], *, title: str) -> Figure:
    """Reducible loss vs non-embedding parameters on log-log axes: each arch's cells and its fitted line."""
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for (arch, (xs, ys)), color in zip(points.items(), ("C0", "C1", "C2", "C3", "C4"), strict=False):
        fit = fits[arch]
        label = arch if fit["alpha"] is None else f"{arch}: alpha {fit['alpha']:.3g}" + (
            f" ± {fit['alpha_se']:.2g}" if fit["alpha_se"] is not None else "")
        axes.scatter(xs, ys, color=color, s=14, alpha=0.7, label=label)
        if fit["alpha"] is not None:
            grid = np.geomspace(min(xs), max(xs), 20)
            axes.plot(grid, fit["coefficient"] * grid ** -fit["alpha"], color=color, linewidth=1)
    axes.set(xscale="log", yscale="log", xlabel="non-embedding parameters",
             ylabel="eval bits/base − Bayes optimum", title=title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return figure
