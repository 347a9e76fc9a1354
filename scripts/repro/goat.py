"""GOAT vs attention with RoPE and with ALiBi: train at T, evaluate at T, 2T and 4T, and compare attention sinks.

    python scripts/repro/goat.py --out runs/repro/goat [--quick] [--models goat,rope,alibi] [--pos-rank 4]

Prints the result table and the files written (results.md, results.json and the figures under --out).
See docs/papers/goat.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import goat
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/goat")
    parser.add_argument("--models", default=",".join(goat.MODELS),
                        help=f"comma-separated models among {list(goat.MODELS)} (default: all)")
    parser.add_argument("--head-dim", type=int, default=32, help="attention head width of every model (default 32)")
    parser.add_argument("--pos-rank", type=int, default=4, help="GOAT's Fourier frequencies R (default 4)")
    parser.add_argument("--eval-rows", type=int, default=16, help="eval rows of 4T bytes (default 16)")
    args, budget = parse_budget(parser, argv, quick=goat.QUICK, full=goat.FULL)
    results = goat.run(args.out, budget=budget, models=tuple(m for m in args.models.split(",") if m),
                       head_dim=args.head_dim, pos_rank=args.pos_rank, eval_rows=args.eval_rows, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
