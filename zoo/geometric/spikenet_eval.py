"""Evaluating a SpikeNet run trained by the shared trainer on zoo_shapes: accuracy in both poses, firing rates.

The trainer reports eval/accuracy on the dataset's validation split only (rotated by default). This reopens the
run's last checkpoint (`icml26zoo.train.load_run`) and measures, on a fresh set drawn by the dataset's own
generator (`train.data.point_sets.generate`, a seed the splits do not use):
- accuracy on the clouds in the canonical pose and on the same clouds randomly rotated (SpikeNet is not
  rotation-invariant, so the gap is the cost of the missing symmetry),
- the symmetry errors of the trained model (`spikenet.equivariance_errors`),
- the firing rate of every neuron layer (`spikenet.firing_rates`, averaged over the batches; the spec's energy
  proxy, which must lie strictly inside (0, 1) after training).

    python -m icml26zoo.geometric.spikenet_eval --workdir /tmp/spikenet [--baseline /tmp/baseline] [--png out.png]

Needs the [train] extra (imported when called). `--baseline` adds the same accuracies for a set_transformer
run (the set_transformer takes the same inputs).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import TYPE_CHECKING

import jax
import numpy as np
from flax import nnx

from icml26zoo.geometric import spikenet

if TYPE_CHECKING:
    from icml26zoo.train.config import DataConfig

# The splits are seeded SeedSequence([config.seed, split index]); this single-entropy seed is a different stream.
EVAL_SEED = 20_260_409


@nnx.jit
def _predict(model: nnx.Module, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
    return jax.numpy.argmax(model(points, features, weights), axis=-1)


def shapes_eval_sets(data: DataConfig, num_examples: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"canonical": (points [E, P, 3], labels [E]), "rotated": the same clouds, each randomly rotated}."""
    # Imported here: the trainer's data layer is the [train] extra, and the zoo's modules import without it.
    from icml26zoo.train.data.point_sets import ShapesDataset, generate

    options = ShapesDataset().options(data)
    seed = np.random.SeedSequence(EVAL_SEED)
    return {pose: generate(options, num_examples, seed, rotate=pose == "rotated") for pose in ("canonical", "rotated")}


def accuracy(model: nnx.Module, points: np.ndarray, labels: np.ndarray, batch: int) -> float:
    """Fraction of clouds points [E, P, 3] whose argmax logit equals labels [E] (full batches only)."""
    correct = total = 0
    for start in range(0, len(labels) - batch + 1, batch):
        cloud = points[start:start + batch]
        predicted = _predict(model, cloud, np.zeros((*cloud.shape[:2], 0), np.float32),
                             np.ones(cloud.shape[:2], np.float32))
        correct += int(np.sum(np.asarray(predicted) == labels[start:start + batch]))
        total += batch
    return correct / total


def mean_firing_rates(model: spikenet.SpikeNet, points: np.ndarray, batch: int) -> dict[str, float]:
    """Each neuron layer's firing rate averaged over full batches of clouds points [E, P, 3]."""
    per_batch = []
    for start in range(0, len(points) - batch + 1, batch):
        cloud = points[start:start + batch]
        per_batch.append(spikenet.firing_rates(model, cloud, np.zeros((*cloud.shape[:2], 0), np.float32),
                                               np.ones(cloud.shape[:2], np.float32)))
    return {name: float(np.mean([rates[name] for rates in per_batch])) for name in per_batch[0]}


def evaluate(workdir: str, num_examples: int = 256, batch: int = 64, *, rates: bool = True) -> dict:
    """{"model", "steps", "canonical", "rotated"[, "firing_rates", "symmetry"]} for the run in `workdir`.

    "symmetry" is `spikenet.equivariance_errors` of the trained model on batch / 4 canonical clouds.
    """
    from icml26zoo.train import load_run

    config, model, state = load_run(workdir)
    sets = shapes_eval_sets(config.data, num_examples)
    result = {"model": config.model.name, "steps": int(state.step)}
    result.update({pose: accuracy(model, *sets[pose], batch) for pose in sets})
    if rates:
        result["firing_rates"] = mean_firing_rates(model, sets["canonical"][0], batch)
        # batch / 4 clouds: equivariance_errors stacks 4 variants, so it reuses firing_rates' compiled program.
        clouds = sets["canonical"][0][: batch // 4]
        result["symmetry"] = spikenet.equivariance_errors(
            model, clouds, np.zeros((*clouds.shape[:2], 0), np.float32), np.ones(clouds.shape[:2], np.float32),
            jax.random.key(EVAL_SEED))
    return result


def train_losses(workdir: str) -> tuple[list[int], list[float]]:
    """(steps, train/loss) logged in `<workdir>/metrics.jsonl`."""
    rows = [json.loads(line) for line in pathlib.Path(workdir, "metrics.jsonl").read_text().splitlines() if line]
    logged = [row for row in rows if "train/loss" in row]
    return [row["step"] for row in logged], [row["train/loss"] for row in logged]


def plot(results: list[dict], workdirs: list[str], png: str) -> None:
    """Training loss of each run (left) and the first run's firing rate per neuron layer (right) -> `png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axes, rate_axes) = plt.subplots(1, 2, figsize=(12, 3.6), gridspec_kw={"width_ratios": [1, 2]})
    for result, workdir in zip(results, workdirs, strict=True):
        loss_axes.plot(*train_losses(workdir), label=result["model"])
    loss_axes.axhline(np.log(8), color="gray", linestyle=":", label="chance (ln 8)")
    loss_axes.set(xlabel="step", ylabel="train loss (canonical pose)", yscale="log", title="zoo_shapes")
    loss_axes.legend(fontsize=8)
    rates = results[0]["firing_rates"]
    rate_axes.bar(range(len(rates)), list(rates.values()), color="tab:purple")
    rate_axes.set_xticks(range(len(rates)), list(rates), rotation=70, fontsize=7)
    rate_axes.set(ylabel="firing rate", ylim=(0, 1), title=f"SpikeNet firing rates after {results[0]['steps']} steps")
    figure.tight_layout()
    figure.savefig(png, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a spikenet run's workdir (with a checkpoint)")
    parser.add_argument("--baseline", help="a set_transformer run's workdir on the same task")
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--png", help="where to write the loss curves and the firing-rate bar chart")
    parser.add_argument("--json", help="where to write the results")
    args = parser.parse_args()
    results = [evaluate(args.workdir, args.examples)]
    if args.baseline:
        results.append(evaluate(args.baseline, args.examples, rates=False))
    print("| model | steps | accuracy, canonical pose | accuracy, rotated |")
    print("|---|---|---|---|")
    for result in results:
        print(f"| {result['model']} | {result['steps']} | {result['canonical']:.3f} | {result['rotated']:.3f} |")
    rates = results[0]["firing_rates"]
    print("firing rates: " + ", ".join(f"{name} {rate:.3f}" for name, rate in rates.items()))
    print(f"firing rates in [{min(rates.values()):.3f}, {max(rates.values()):.3f}]")
    print("max |logit error|: " + ", ".join(f"{name} {error:.3g}" for name, error in results[0]["symmetry"].items()))
    if args.png:
        plot(results, [args.workdir, args.baseline][: len(results)], args.png)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
