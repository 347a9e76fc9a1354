"""The end-of-run summary printed by the CLI."""

from __future__ import annotations

import pathlib
from typing import Any


def print_summary(summary: dict[str, Any], workdir: str | pathlib.Path) -> None:
    """Prints eval metrics (bits per byte beside the unigram baseline), the sample and the output files."""
    workdir = pathlib.Path(workdir)
    lines = ["", "== results =="]
    for key in ("eval/loss", "eval/accuracy"):
        if key in summary:
            lines.append(f"{key:>28}: {summary[key]:.4f}")
    if "eval/bits_per_byte" in summary:
        lines.append(f"{'eval/bits_per_byte':>28}: {summary['eval/bits_per_byte']:.4f}")
        if "eval/unigram_bits_per_byte" in summary:
            lines.append(f"{'unigram baseline (same split)':>28}: {summary['eval/unigram_bits_per_byte']:.4f}")
    if "sample" in summary:
        lines += ["", "== sample ==", summary["sample"], "== end of sample =="]
    lines += ["", f"metrics: {workdir / 'metrics.jsonl'}"]
    if "plot" in summary:
        lines.append(f"loss curve: {summary['plot']}")
    print("\n".join(lines))
