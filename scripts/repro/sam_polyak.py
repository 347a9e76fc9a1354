"""SAM-Polyak (arXiv 2606.01827), untuned, vs plain SAM over a learning-rate sweep on topics classification.

    python scripts/repro/sam_polyak.py --out /tmp/repro_sam_polyak              # the FULL budget
    python scripts/repro/sam_polyak.py --quick --out /tmp/sam_polyak_quick     # what the notebook runs
    python scripts/repro/sam_polyak.py --sam-lrs 0.03,0.1,0.3 --polyak-cap 10 --rho 0.1 --steps 300

Compiled programs are cached under <out>/jax_cache (unless a JAX compilation cache is already configured), so
the cells of later seeds reuse the first seed's compiled steps. See docs/papers/sam_polyak.md and
icml26zoo.repro.sam_polyak.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import sam_polyak
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/sam_polyak"




def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--optimizers", help=f"comma-separated, from {','.join(sam_polyak.OPTIMIZERS)} (default: both)")
    parser.add_argument("--sam-lrs", help="plain SAM's learning rates, comma-separated (default "
                                          f"{','.join(f'{v:g}' for v in sam_polyak.SAM_LEARNING_RATES)}; --quick: "
                                          f"{','.join(f'{v:g}' for v in sam_polyak.QUICK_ARGS['sam_learning_rates'])})")
    parser.add_argument("--polyak-cap", type=float, default=1.0, help="SAM-Polyak's step cap gamma_b (default 1)")
    parser.add_argument("--rho", type=float, default=0.05, help="SAM radius rho for both optimizers (default 0.05)")
    parser.add_argument("--probe-batches", type=int, help="minibatches on which the trained SAM-Polyak step is "
                                                          "measured (default 8; --quick: 2)")
    args, budget = parse_budget(parser, argv, quick=sam_polyak.QUICK, full=sam_polyak.FULL)
    kwargs = dict(sam_polyak.QUICK_ARGS) if args.quick else {}
    if args.optimizers is not None:
        kwargs["optimizers"] = comma_list("--optimizers", args.optimizers)
    if args.sam_lrs is not None:
        kwargs["sam_learning_rates"] = comma_list("--sam-lrs", args.sam_lrs, float)
    if args.probe_batches is not None:
        kwargs["probe_batches"] = args.probe_batches
    results = sam_polyak.run(args.out, budget=budget, polyak_cap=args.polyak_cap, rho=args.rho, resume=args.resume,
                             **kwargs)
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
