"""Diag-CFM (arXiv 2603.15925) vs standard CFM: inverse-design round trips on a smooth analytic benchmark.

    python scripts/repro/diag_cfm.py --out /tmp/repro_diag_cfm                 # the FULL budget
    python scripts/repro/diag_cfm.py --quick --out /tmp/diag_cfm_quick        # the QUICK pipeline check
    python scripts/repro/diag_cfm.py --dims 4,16 --orders shuffled --candidates 32 --steps 2000

See docs/papers/diag_cfm.md and icml26zoo.repro.diag_cfm.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import diag_cfm
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/diag_cfm"
INT_FLAGS = ("train_pairs", "targets", "candidates", "ode_steps", "width", "depth", "n_labels")




def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--pairings", help="comma-separated, from diag,standard (default: both)")
    parser.add_argument("--dims", help=f"design dimensions P (default {','.join(map(str, diag_cfm.DIMS))})")
    parser.add_argument("--orders", help="comma-separated, from aligned,shuffled (default: both)")
    for name in INT_FLAGS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"{name} of run() (see its docstring)")
    args, budget = parse_budget(parser, argv, quick=diag_cfm.QUICK, full=diag_cfm.FULL)
    kwargs = dict(diag_cfm.QUICK_ARGS) if args.quick else {}
    if args.pairings is not None:
        kwargs["pairings"] = comma_list("--pairings", args.pairings)
    if args.orders is not None:
        kwargs["orders"] = comma_list("--orders", args.orders)
    if args.dims is not None:
        kwargs["dims"] = comma_list("--dims", args.dims, int)
    kwargs.update({name: getattr(args, name) for name in INT_FLAGS if getattr(args, name) is not None})
    print_results(diag_cfm.run(args.out, budget=budget, resume=args.resume, **kwargs))


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
