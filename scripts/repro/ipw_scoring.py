"""IPW scoring rule (arXiv 2606.03332, reconstruction) vs log-loss for propensities: IPW and Hájek ATE errors.

    python scripts/repro/ipw_scoring.py --out runs/repro/ipw_scoring            # FULL: 100 data sets per strength
    python scripts/repro/ipw_scoring.py --quick --out /tmp/ipw_scoring_quick   # QUICK: 4 data sets of 500 units
    python scripts/repro/ipw_scoring.py --methods log_loss,ipw_sigmoid --strengths 2.5 --q-min 0.01

No model goes through the shared trainer: --steps is the number of L-BFGS iterations, --batch-size the units
per data set, --seq-len the covariate dimension, --seeds the data sets (see icml26zoo.repro.ipw_scoring).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import ipw_scoring
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main

DEFAULT_OUT = "runs/repro/ipw_scoring"



def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--methods", default=",".join(ipw_scoring.METHODS),
                        help=f"comma-separated, of {','.join(ipw_scoring.METHODS)} (default: all)")
    parser.add_argument("--strengths", default=",".join(f"{s:g}" for s in ipw_scoring.STRENGTHS),
                        help="confounding strengths, logit p(x) = strength * beta'x (default 1,2.5)")
    parser.add_argument("--q-min", type=float, default=ipw_scoring.Q_MIN,
                        help=f"propensity floor for the estimators and the rule's loss (default {ipw_scoring.Q_MIN:g})")
    args, budget = parse_budget(parser, argv, quick=ipw_scoring.QUICK, full=ipw_scoring.FULL)
    methods = comma_list("--methods", args.methods)
    results = ipw_scoring.run(args.out, budget=budget, methods=methods,
                              strengths=comma_list("--strengths", args.strengths, float), q_min=args.q_min,
                              resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
