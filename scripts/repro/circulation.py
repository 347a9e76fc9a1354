"""Circulation attention (arXiv 2605.27476): an (α, β) grid on the tiny byte LM with the Hopfield stability
measures per layer through training.

    python scripts/repro/circulation.py --out runs/repro/circulation [--quick] [--alphas 0.9,1,1.2]
        [--betas 1,3] [--measure-points 6] [--measure-rows 8] [--steps N] [--seeds 0,1] [--resume]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import circulation
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def _floats(flag: str, text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.split("\n\n")[0], default_out="runs/repro/circulation")
    parser.add_argument("--alphas", help="comma-separated circulation knobs α (default 0.9,1,1.2)")
    parser.add_argument("--betas", help="comma-separated blend factors β >= 0 (default 1,3)")
    parser.add_argument("--measure-points", type=int, help="checkpoints measured per cell (default 6; QUICK 2)")
    parser.add_argument("--measure-rows", type=int, default=8, help="held-out rows in the measurement batch")
    args, budget = parse_budget(parser, argv, quick=circulation.QUICK, full=circulation.FULL)
    results = circulation.run(args.out, budget=budget, alphas=_floats("--alphas", args.alphas),
                              betas=_floats("--betas", args.betas), measure_points=args.measure_points,
                              measure_rows=args.measure_rows, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
