"""Divergence Decoding (arXiv 2605.31293) on synthetic name:attribute facts: forget vs retain likelihood, distillation.

    python scripts/repro/divergence_decoding.py --out /tmp/repro_divergence_decoding          # the FULL budget
    python scripts/repro/divergence_decoding.py --quick --out /tmp/dd_quick                  # what the notebook runs
    python scripts/repro/divergence_decoding.py --alphas 1,2 --forget-aux-data all --num-facts 100

Compiled programs are cached under <out>/jax_cache (unless a JAX compilation cache is already configured). See
docs/papers/divergence_decoding.md and icml26zoo.repro.divergence_decoding.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import divergence_decoding
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/divergence_decoding"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--alphas", help="steering strengths, comma-separated (default "
                                         f"{','.join(f'{a:g}' for a in divergence_decoding.ALPHAS)})")
    parser.add_argument("--num-facts", type=int, help="facts in the corpus (default 200; --quick: 40)")
    parser.add_argument("--forget-fraction", type=float, default=0.1, help="share of facts to forget (default 0.1)")
    parser.add_argument("--forget-aux-data", help="data of the forget auxiliary, comma-separated from "
                                                  f"{','.join(divergence_decoding.FORGET_AUX_DATA)} (default both)")
    parser.add_argument("--distill-alpha", type=float, default=1.5, help="alpha distilled into the base (default 1.5)")
    parser.add_argument("--aux-d-model", type=int, default=divergence_decoding.AUX_D_MODEL,
                        help=f"width of the auxiliary models (default {divergence_decoding.AUX_D_MODEL})")
    parser.add_argument("--distill-steps", type=int, help="distillation steps (default 100; --quick: 5)")
    args, budget = parse_budget(parser, argv, quick=divergence_decoding.QUICK, full=divergence_decoding.FULL)
    kwargs = dict(divergence_decoding.QUICK_ARGS) if args.quick else {}
    if args.alphas is not None:
        kwargs["alphas"] = comma_list("--alphas", args.alphas, float)
    if args.forget_aux_data is not None:
        kwargs["forget_aux_data"] = comma_list("--forget-aux-data", args.forget_aux_data)
    if args.num_facts is not None:
        kwargs["num_facts"] = args.num_facts
    if args.distill_steps is not None:
        kwargs["distill_steps"] = args.distill_steps
    results = divergence_decoding.run(args.out, budget=budget, forget_fraction=args.forget_fraction,
                                      distill_alpha=args.distill_alpha, aux_d_model=args.aux_d_model,
                                      resume=args.resume, **kwargs)
    print_results(results)


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
