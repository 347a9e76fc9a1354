"""PUMA (arXiv 2602.10314): progressive unmasking vs random masking for a masked-diffusion byte LM.

    python scripts/repro/puma.py --out /tmp/repro_puma                 # the FULL budget
    python scripts/repro/puma.py --quick --out /tmp/puma_quick         # the QUICK budget the tests run
    python scripts/repro/puma.py --phases 4 --mode confidence_collapse --steps 300

Compiled programs are cached under <out>/jax_cache (unless a JAX compilation cache is already configured). See
docs/papers/puma.md and icml26zoo.repro.puma.run for the experiment.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from icml26zoo.repro import puma
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/puma"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--methods", help=f"comma-separated, from {','.join(puma.METHODS)} (default: both)")
    parser.add_argument("--phases", type=int, help="PUMA's number of phases K (default 8; --quick: 4)")
    parser.add_argument("--mode", help="PUMA's mode: standard (default) or confidence_collapse")
    parser.add_argument("--eval-every", type=int, help="steps between evaluations (default 50; --quick: 4)")
    args, budget = parse_budget(parser, argv, quick=puma.QUICK, full=puma.FULL)
    setup = puma.QUICK_SETUP if args.quick else puma.FULL_SETUP
    changes = {"num_phases": args.phases, "mode": args.mode, "eval_every": args.eval_every}
    setup = dataclasses.replace(setup, **{k: v for k, v in changes.items() if v is not None})
    kwargs = {}
    if args.methods is not None:
        kwargs["methods"] = tuple(name.strip() for name in args.methods.split(",") if name.strip())
    print_results(puma.run(args.out, budget=budget, setup=setup, resume=args.resume, **kwargs))


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
