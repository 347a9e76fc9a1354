"""TALDA: the idealised Lyapunov function traced for GDA, AGDA and TALDA-R on two-sided PL games.

    python scripts/repro/talda.py --out runs/repro/talda [--quick] [--games quadratic_B10,yang2020]
                                  [--methods gda,agda,agda_theory,talda] [--lam 0.1] [--inner-steps 200]
                                  [--tolerance 1e-8] [--steps 3000] [--batch-size 8] [--seq-len 10] [--seeds 0,1,2]

No model is trained: --steps is the number of iterations, --batch-size the starting points per game and seed,
--seq-len the dimension of the quadratic games (see icml26zoo.repro.talda).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import talda
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/talda")
    parser.add_argument("--games", default=",".join(talda.GAMES), help=f"comma-separated, of {talda.GAMES}")
    parser.add_argument("--methods", default=",".join(talda.METHODS), help=f"comma-separated, of {talda.METHODS}")
    parser.add_argument("--lam", type=float, default=0.1, help="λ, the weight of Φ(x) − f(x, y) in V")
    parser.add_argument("--inner-steps", type=int, default=200, help="inner ascent steps estimating Φ")
    parser.add_argument("--tolerance", type=float, default=1e-8, help="iterations until V_t <= tolerance V_0")
    args, budget = parse_budget(parser, argv, quick=talda.QUICK, full=talda.FULL)
    results = talda.run(args.out, budget=budget, games=tuple(args.games.split(",")),
                        methods=tuple(args.methods.split(",")), lam=args.lam, inner_steps=args.inner_steps,
                        tolerance=args.tolerance, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
