"""EDEN comparison: Llama, Mamba and Hyena at matched parameters and an equal token budget.

Paper: "Scaling Laws and Architectural Frontiers in Metagenomic Foundation Models" (EDEN, ICML 2026).

    python scripts/eden_compare.py [--out bench_out/eden] [--steps 120] [--batch-size 8] [--seq-len 128]
                                   [--sizes small,medium] [--archs llama,mamba,hyena] [--dataset nucleotide]

Trains every (architecture, size) cell of train.presets.eden_lm with the shared training loop, all with the
same steps × batch × sequence length, then writes eden_compare.{md,json} (arch, size, parameters, tokens,
final eval loss, bits per base, gaps to the optimum, wall time) and eden_compare.png (bits vs parameters).

On the nucleotide dataset the generator is known, so the table also shows its entropy rate (the lowest
loss any model can reach; an estimate ± standard error) and the Bayes-optimal loss of the very eval rows
the models are scored on. On the byte corpus (--dataset pystdlib) only the unigram baseline is known.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import shutil
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from icml26zoo.models import build_model, count_params  # noqa: E402
from icml26zoo.train import data as data_lib  # noqa: E402
from icml26zoo.train.config import TrainConfig  # noqa: E402
from icml26zoo.train.data import nucleotide  # noqa: E402
from icml26zoo.train.loop import train  # noqa: E402
from icml26zoo.train.presets import EDEN_ARCHS, EDEN_DATASETS, EDEN_SHAPES, eden_lm  # noqa: E402

COLUMNS = ("arch", "size", "d_model", "layers", "params", "tokens", "eval_loss", "bits_per_base",
           "gap_to_entropy_rate", "gap_to_bayes_optimum", "wall_s")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out/eden", help="directory for the table, plot and runs")
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps per run (equal for all)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per step")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per row")
    parser.add_argument("--sizes", default="small,medium", help=f"comma-separated, from {list(EDEN_SHAPES)}")
    parser.add_argument("--archs", default="llama,mamba,hyena", help=f"comma-separated, from {list(EDEN_ARCHS)}")
    parser.add_argument("--dataset", default="nucleotide", choices=EDEN_DATASETS)
    parser.add_argument("--data-dir", default=None, help="TFDS data directory (default: the zoo's)")
    args = parser.parse_args(argv)
    args.sizes, args.archs = args.sizes.split(","), args.archs.split(",")
    for name, values, allowed in (("--sizes", args.sizes, EDEN_SHAPES), ("--archs", args.archs, EDEN_ARCHS)):
        if not values or any(v not in allowed for v in values):
            parser.error(f"{name} must be a comma-separated subset of {list(allowed)}, got {values}")
    for name in ("steps", "batch_size", "seq_len"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def cell_config(args: argparse.Namespace, arch: str, size: str) -> TrainConfig:
    """The preset of one cell, with the shared budget, no checkpoints and a quiet log."""
    config = eden_lm(arch, size, args.dataset, num_steps=args.steps, batch_size=args.batch_size,
                     seq_len=args.seq_len)
    data = dataclasses.replace(config.data, data_dir=args.data_dir)
    return dataclasses.replace(config, data=data, checkpoint_every=0, tensorboard=False, progress_bar=False)


def parameter_count(config: TrainConfig) -> int:
    """Parameters of the model of `config` (shapes only: nothing is initialized)."""
    return count_params(nnx.eval_shape(lambda: build_model(config.model, rngs=nnx.Rngs(0))))


def eval_pieces(config: TrainConfig) -> list[np.ndarray]:
    """The base codes each eval segment holds (its inputs plus its last target), as the model sees them."""
    iterator = data_lib.make_eval_iterator(config.data, batch_size=config.batch_size, seq_len=config.seq_len,
                                           max_batches=config.eval_batches, process_index=0, process_count=1)
    pieces = []
    for batch in iterator:
        for inputs, targets, segments in zip(batch["inputs"], batch["targets"], batch["segment_ids"], strict=True):
            for segment in np.unique(segments[segments > 0]):
                mask = segments == segment
                tokens = np.concatenate([inputs[mask], targets[mask][-1:]])
                pieces.append(nucleotide.to_codes(tokens))
    return pieces


def optimum(config: TrainConfig) -> dict[str, float]:
    """The generator's entropy rate (± standard error) and the Bayes-optimal bits/base on the eval rows."""
    seed = data_lib.sources.nucleotide_config(config.data).seed
    rate, error = nucleotide.entropy_rate(seed)
    total, count = nucleotide.optimal_bits(seed, eval_pieces(config))
    return {"entropy_rate": rate, "entropy_rate_stderr": error, "bayes_optimum": total / count}


def run_cell(args: argparse.Namespace, arch: str, size: str, reference: dict[str, float]) -> dict:
    config = cell_config(args, arch, size)
    workdir = pathlib.Path(args.out) / "runs" / f"{arch}_{size}"
    # A fresh directory: with checkpoints off, an old metrics.jsonl would only be appended to.
    shutil.rmtree(workdir, ignore_errors=True)
    start = time.perf_counter()
    summary = train(config, workdir)
    wall = time.perf_counter() - start
    bits = summary["eval/loss"] / math.log(2)
    row = {"arch": arch, "size": size, "d_model": config.model.d_model, "layers": config.model.num_layers,
           "params": parameter_count(config), "tokens": config.num_steps * config.batch_size * config.seq_len,
           "eval_loss": summary["eval/loss"], "bits_per_base": bits, "unigram_bits": summary.get(
               "eval/unigram_bits_per_byte"), "wall_s": wall}
    row["gap_to_entropy_rate"] = bits - reference["entropy_rate"] if "entropy_rate" in reference else None
    row["gap_to_bayes_optimum"] = bits - reference["bayes_optimum"] if "bayes_optimum" in reference else None
    print(f"{arch:6s} {size:7s} params {row['params']:>9,d}  bits/base {bits:.4f}  wall {wall:6.1f} s", flush=True)
    return row


def markdown(rows: list[dict], reference: dict[str, float], args: argparse.Namespace) -> str:
    unit = "bits/base" if args.dataset == "nucleotide" else "bits/byte"
    tokens = args.steps * args.batch_size * args.seq_len
    lines = [f"# EDEN comparison on `{args.dataset}`", "",
             f"Equal budget: {args.steps} steps × {args.batch_size} rows × {args.seq_len} tokens = "
             f"{tokens:,} tokens per run; eval loss in nats, {unit} = loss / ln 2."]
    if "entropy_rate" in reference:
        rate, error, bayes = (reference[k] for k in ("entropy_rate", "entropy_rate_stderr", "bayes_optimum"))
        lines.append(f"Generator entropy rate: {rate:.4f} ± {error:.4f} bits/base; Bayes-optimal loss on the "
                     f"same eval rows: {bayes:.4f} bits/base.")
    if rows and rows[0]["unigram_bits"] is not None:
        lines.append(f"Unigram baseline (same eval split): {rows[0]['unigram_bits']:.4f} {unit}.")
    header = [unit.replace("/", "_per_") if name == "bits_per_base" else name for name in COLUMNS]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [_format(row[name], digits=1 if name == "wall_s" else 4) for name in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _format(value, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def plot(rows: list[dict], reference: dict[str, float], path: pathlib.Path, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for arch in dict.fromkeys(row["arch"] for row in rows):
        cells = sorted((row["params"], row["bits_per_base"]) for row in rows if row["arch"] == arch)
        ax.plot(*zip(*cells, strict=True), marker="o", label=arch)
    if "entropy_rate" in reference:
        ax.axhline(reference["entropy_rate"], color="k", ls="--", lw=1, label="entropy rate (optimum)")
    if rows[0]["unigram_bits"] is not None:
        ax.axhline(rows[0]["unigram_bits"], color="gray", ls=":", lw=1, label="unigram baseline")
    unit = "bits/base" if dataset == "nucleotide" else "bits/byte"
    ax.set(xscale="log", xlabel="parameters", ylabel=f"final eval {unit}",
           title=f"EDEN comparison ({dataset}, {rows[0]['tokens']:,} tokens per run)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reference: dict[str, float] = {}
    if args.dataset == "nucleotide":
        first = cell_config(args, args.archs[0], args.sizes[0])
        data_lib.prepare(first.data)
        reference = optimum(first)
        print(f"entropy rate {reference['entropy_rate']:.4f} ± {reference['entropy_rate_stderr']:.4f} bits/base; "
              f"Bayes optimum on the eval rows {reference['bayes_optimum']:.4f}", flush=True)
    rows = [run_cell(args, arch, size, reference) for size in args.sizes for arch in args.archs]
    result = {"dataset": args.dataset, "steps": args.steps, "batch_size": args.batch_size, "seq_len": args.seq_len,
              "reference": reference, "rows": rows,
              "configs": {f"{r['arch']}_{r['size']}": dataclasses.asdict(cell_config(args, r["arch"], r["size"]))
                          for r in rows}}
    (out / "eden_compare.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "eden_compare.md").write_text(markdown(rows, reference, args))
    plot(rows, reference, out / "eden_compare.png", args.dataset)
    print(markdown(rows, reference, args))
    print(f"wrote {out / 'eden_compare.md'}, {out / 'eden_compare.json'} and {out / 'eden_compare.png'}")
    return result


if __name__ == "__main__":
    main()
