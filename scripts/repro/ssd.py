"""Structured state-space duality: the three forms agree, the 1-SS condition, and softmax's rank explosion.

    python scripts/repro/ssd.py --out runs/repro/ssd [--quick] [--state-size 8] [--chunk-size 16]
                                [--equality-len 100] [--rank-rtol 1e-5] [--steps 7] [--seq-len 512] [--seeds 0,1,2]

Nothing is trained: --steps is the number of lengths T in the rank sweep, --seq-len the largest T,
--batch-size the rows of the equality input (see icml26zoo.repro.ssd).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import ssd
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/ssd")
    parser.add_argument("--state-size", type=int, default=8, help="N: SSD state size and softmax q/k width")
    parser.add_argument("--chunk-size", type=int, default=16, help="chunk length of the chunked form")
    parser.add_argument("--equality-len", type=int, default=100, help="T of the three-way-equality input")
    parser.add_argument("--rank-rtol", type=float, default=1e-5, help="relative singular-value threshold")
    args, budget = parse_budget(parser, argv, quick=ssd.QUICK, full=ssd.FULL)
    results = ssd.run(args.out, budget=budget, state_size=args.state_size, chunk_size=args.chunk_size,
                      equality_len=args.equality_len, rank_rtol=args.rank_rtol, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
