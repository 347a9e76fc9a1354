"""Mixture-of-Gaussians (arXiv 2605.28078) and SGG (arXiv 2606.08681) noise against the analytic Gaussian.

    python scripts/repro/dp_mechanisms.py --out /tmp/repro_dp_mechanisms       # the FULL grids
    python scripts/repro/dp_mechanisms.py --quick --out /tmp/dp_quick          # what the notebook runs
    python scripts/repro/dp_mechanisms.py --eps 1,4 --deltas 1e-6 --dims 1,3 --dp-eps 2

The budget's steps, batch size and seeds are the DP-SGD part's; --seq-len is unused. See
docs/papers/dp_mixture_mechanisms.md, docs/papers/sgg_mechanisms.md and icml26zoo.repro.dp_mechanisms.run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import dp_mechanisms
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main

DEFAULT_OUT = "runs/repro/dp_mechanisms"



def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--eps", help="epsilons of the scalar comparison (default 0.5,1,2,4,8)")
    parser.add_argument("--deltas", help="deltas of the scalar comparison (default 1e-5,1e-6)")
    parser.add_argument("--dims", help="dimensions of the SGG sweep (default 1,2,5,10)")
    parser.add_argument("--powers", help="SGG shapes p (must include 1 and 2; default 0.5,1,1.5,2,3)")
    parser.add_argument("--dp-eps", type=float, help="DP-SGD's target epsilon (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="processes for the calibrations (default 1)")
    args, budget = parse_budget(parser, argv, quick=dp_mechanisms.QUICK, full=dp_mechanisms.FULL)
    kwargs = dict(dp_mechanisms.QUICK_ARGS) if args.quick else {}
    for flag, field, kind in (("--eps", "eps_values", float), ("--deltas", "deltas", float),
                              ("--dims", "dims", int), ("--powers", "powers", float)):
        text = getattr(args, field if field != "eps_values" else "eps")
        if text is not None:
            kwargs[field] = comma_list(flag, text, kind)
    if args.dp_eps is not None:
        kwargs["dp_eps"] = args.dp_eps
    print_results(dp_mechanisms.run(args.out, budget=budget, resume=args.resume, workers=args.workers, **kwargs))


if __name__ == "__main__":
    sys.exit(run_main(main))
