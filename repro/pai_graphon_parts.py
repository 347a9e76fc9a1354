"""The pieces of the PaI-graphon reproduction: the scoring data, the MLP, one mask per criterion, the figures.

The classifier is a ReLU MLP d_in -> n -> n -> C in plain JAX (a dict of `kernel`/`bias` leaves, so that
`icml26zoo.sparsity.masks` prunes the kernels and never the biases). Its input is a bag-of-tokens view of the
zoo's `topics` task (`icml26zoo.train.data.topics.generate`): the per-token frequencies of a topics row
(informative: each token belongs to one class's group) next to the frequencies of an independent row of
uniform noise tokens (uninformative distractors), standardised over the scoring batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.figure import Figure

from icml26zoo.sparsity import grasp_scores, magnitude_mask, mask_from_scores, snip_scores
from icml26zoo.train.data.topics import generate

LAYERS = ("input", "hidden", "readout")  # the kernels: [d_in, n], [n, n] (the n x n graph studied), [n, C]
GRASP_TEMPERATURE = 200.0  # GraSP's official logit temperature (flattens the softmax)


def topic_features(batch_size: int, seq_len: int, *, num_classes: int = 4, num_tokens: int = 32,
                   noise_tokens: int = 32, signal: float = 0.2, seed: int = 0) -> dict[str, np.ndarray]:
    """A class-balanced scoring batch: {"x": float32 [B, num_tokens + noise_tokens], "y": int32 [B]}.

    Row b's first num_tokens features are the token frequencies of a topics row of seq_len tokens (class y_b),
    the last noise_tokens those of a class-independent uniform row; every feature is standardised over the
    batch. batch_size must be a multiple of num_classes (batch_size / C rows per class).
    """
    if batch_size % num_classes:
        raise ValueError(f"batch_size must be a multiple of num_classes ({num_classes}) for a class-balanced "
                         f"batch, got {batch_size}")
    pool = 8 * batch_size
    tokens, labels = generate(num_classes, num_tokens, seq_len, signal, pool, np.random.SeedSequence([seed, 0]))
    per_class = batch_size // num_classes
    rows = np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in range(num_classes)])
    if rows.size != batch_size:  # a class with fewer than per_class rows in the pool (not seen in practice)
        raise ValueError(f"could not draw {per_class} rows per class from {pool} topics rows")
    noise, _ = generate(1, noise_tokens, seq_len, 0.0, batch_size, np.random.SeedSequence([seed, 1]))
    informative = _frequencies(tokens[rows] - num_classes, num_tokens)
    x = np.concatenate([informative, _frequencies(noise - 1, noise_tokens)], axis=1)
    x = (x - x.mean(axis=0)) / np.maximum(x.std(axis=0), 1e-6)
    return {"x": x.astype(np.float32), "y": labels[rows].astype(np.int32)}


def _frequencies(tokens: np.ndarray, vocab: int) -> np.ndarray:
    """[B, L] token ids in [0, vocab) -> [B, vocab] frequencies."""
    counts = np.stack([np.bincount(row, minlength=vocab) for row in tokens])
    return counts / tokens.shape[1]


def init_mlp(seed: int, d_in: int, width: int, num_classes: int, *, init: str = "lecun") -> dict:
    """Gaussian kernels, zero biases: std 1/sqrt(fan_in) ("lecun") or sqrt(2/(fan_in + fan_out)) ("xavier",
    GraSP's re-initialisation). Drawn with numpy (`SeedSequence([seed, layer])`): one jax.random program per
    shape would be compiled for every width, which costs more than all the pruning here."""
    sizes = {"input": (d_in, width), "hidden": (width, width), "readout": (width, num_classes)}
    params = {}
    for i, name in enumerate(LAYERS):
        fan_in, fan_out = sizes[name]
        std = (1.0 / fan_in) ** 0.5 if init == "lecun" else (2.0 / (fan_in + fan_out)) ** 0.5
        kernel = std * np.random.default_rng([seed, i]).standard_normal(sizes[name])
        params[name] = {"kernel": jnp.asarray(kernel, jnp.float32), "bias": jnp.zeros((fan_out,), jnp.float32)}
    return params


def mlp_logits(params: dict, x: jax.Array) -> jax.Array:
    """[B, d_in] -> [B, C]."""
    h = x
    for name in LAYERS[:-1]:
        h = jax.nn.relu(h @ params[name]["kernel"] + params[name]["bias"])
    return h @ params["readout"]["kernel"] + params["readout"]["bias"]


def mlp_loss(params: dict, batch: dict, temperature: float = 1.0) -> jax.Array:
    """Mean cross-entropy of logits / temperature."""
    logits = mlp_logits(params, batch["x"]) / jnp.float32(temperature)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]))


def _grasp_loss(params: dict, batch: dict) -> jax.Array:
    return mlp_loss(params, batch, GRASP_TEMPERATURE)


def prune(method: str, params: dict, batch: dict, *, sparsity: float, scope: str, seed: int,
          grasp_reinit: bool = True) -> tuple[dict, np.ndarray | None]:
    """(mask tree, the hidden layer's keep-largest saliency [n, n] or None for Random/Magnitude).

    seed: the init seed (the Random scores and GraSP's re-initialisation draw from it).
    GraSP (official recipe): re-initialise Xavier-normal when grasp_reinit, score logits / 200 on the two halves
    of the class-balanced batch (the halves keep the class balance: rows are grouped by class), keep the
    smallest −θ ⊙ Hg, i.e. the largest θ ⊙ Hg.
    """
    if method == "random":  # random_mask's criterion (U(0, 1) scores) with numpy draws, for the reason of init_mlp
        rng = np.random.default_rng([seed, 7])
        scores = jax.tree.map(lambda p: rng.random(p.shape), params)
        return mask_from_scores(params, scores, sparsity=sparsity, scope=scope), None
    if method == "magnitude":
        return magnitude_mask(params, sparsity=sparsity, scope=scope), None
    if method == "snip":
        scores = snip_scores(params, mlp_loss, batch)  # what snip_mask keeps the largest of, computed once
        mask = mask_from_scores(params, scores, sparsity=sparsity, scope=scope)
        return mask, np.asarray(scores["hidden"]["kernel"])
    if grasp_reinit:
        d_in, width = params["input"]["kernel"].shape
        params = init_mlp(seed, d_in, width, params["readout"]["kernel"].shape[1], init="xavier")
    halves = _halves(batch)
    kept = jax.tree.map(jnp.negative, grasp_scores(params, _grasp_loss, halves))  # as grasp_mask, computed once
    mask = mask_from_scores(params, kept, sparsity=sparsity, scope=scope)
    return mask, np.asarray(kept["hidden"]["kernel"])


def _halves(batch: dict) -> list[dict]:
    """Two halves of a class-balanced batch, each class-balanced (every other row of each class block)."""
    return [{k: v[start::2] for k, v in batch.items()} for start in (0, 1)]


def convergence_figure(widths: Sequence[int], curves: dict[str, dict[str, list[float]]]) -> Figure:
    """Two log-log panels, L2 and cut distance to the predicted graphon vs width, one line per method."""
    figure = Figure(figsize=(9.0, 3.8), layout="constrained")
    for col, (metric, label) in enumerate((("l2", "L2 distance"), ("cut", "cut norm"))):
        axes = figure.add_subplot(1, 2, col + 1)
        for method, series in curves.items():
            axes.plot(widths, series[metric], marker="o", markersize=3, label=method)
        first = max(series[metric][0] for series in curves.values())
        axes.plot(widths, [first * (widths[0] / w) ** 0.5 for w in widths], "--", color="gray", linewidth=1,
                  label="∝ n^-1/2")
        axes.set(xscale="log", yscale="log", xlabel="hidden width n",
                 ylabel=f"{label}, empirical vs predicted", title=f"{label} to the FSM graphon")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7)
    return figure


def graphon_figure(images: dict[str, tuple[np.ndarray, np.ndarray]], width: int) -> Figure:
    """Per method, the empirical graphon at `width` (top) over the predicted graphon (bottom)."""
    figure = Figure(figsize=(2.2 * len(images) + 0.8, 4.6), layout="constrained")
    axes = figure.subplots(2, len(images), squeeze=False)
    image = None
    for col, (method, (empirical, predicted)) in enumerate(images.items()):
        for row, (array, kind) in enumerate(((empirical, f"empirical, n={width}"), (predicted, "predicted"))):
            image = axes[row, col].imshow(array, vmin=0.0, vmax=1.0, cmap="viridis")
            axes[row, col].set(title=f"{method}: {kind}", xticks=[], yticks=[])
            axes[row, col].title.set_fontsize(8)
    axes[1, 0].set(xlabel="output neurons (by in-degree)", ylabel="input neurons (by out-degree)")
    figure.colorbar(image, ax=axes, shrink=0.8, label="cell density")
    return figure
