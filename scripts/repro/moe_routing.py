"""MoE routing reproduction: expert load (ConfSMoE vs top-k softmax, no balancing loss) and expert diversity
(MP-MoE vs top-k) per router on the synthetic multimodal task.

    python scripts/repro/moe_routing.py --out /tmp/repro_moe_routing            # the FULL budget
    python scripts/repro/moe_routing.py --quick --out /tmp/moe_routing_quick   # what the notebook runs
    python scripts/repro/moe_routing.py --routers topk_softmax,confidence,mahalanobis --steps 500

--steps are Adam steps, --batch-size samples per step and --seq-len tokens per modality. See
docs/papers/confsmoe.md, docs/papers/mp_moe.md and icml26zoo.repro.moe_routing.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import moe_routing
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/moe_routing"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--routers", help=f"comma-separated, from {','.join(moe_routing.ROUTERS)} (default: all; "
                                          f"--quick: {','.join(moe_routing.QUICK_ARGS['routers'])})")
    parser.add_argument("--experts", type=int, help="experts per layer (default 8; --quick: 4)")
    args, budget = parse_budget(parser, argv, quick=moe_routing.QUICK, full=moe_routing.FULL)
    kwargs = dict(moe_routing.QUICK_ARGS) if args.quick else {}
    if args.routers is not None:
        kwargs["routers"] = comma_list("--routers", args.routers)
    if args.experts is not None:
        kwargs["experts"] = args.experts
    print_results(moe_routing.run(args.out, budget=budget, resume=args.resume, **kwargs))


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
