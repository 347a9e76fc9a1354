"""PCFG next-token KL and layer-wise parse probes (ICML 2026, "How Transformers Represent Hierarchies").

    python scripts/repro/pcfg_probing.py --out /tmp/repro_pcfg_probing            # the FULL budget (minutes on 2 cores)
    python scripts/repro/pcfg_probing.py --quick --out /tmp/pcfg_probing_quick
    python scripts/repro/pcfg_probing.py --steps 800 --probe-sentences 1024 --checkpoints 16

Trains the pcfg_tiny preset, reports the mean KL to the grammar's exact next-token distribution at every
checkpoint and the held-out linear / MLP probe scores of every layer. See docs/papers/pcfg_probing.md and
icml26zoo.repro.pcfg_probing.run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import pcfg_probing
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main, use_compilation_cache

DEFAULT_OUT = "runs/repro/pcfg_probing"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--probe-sentences", type=int,
                        help="validation sentences whose tokens are probed (default 512; --quick: 96)")
    parser.add_argument("--checkpoints", type=int, help="checkpoints on the KL curve (default 8; --quick: 3)")
    args, budget = parse_budget(parser, argv, quick=pcfg_probing.QUICK, full=pcfg_probing.FULL)
    kwargs = dict(pcfg_probing.QUICK_ARGS) if args.quick else {}
    for name in ("probe_sentences", "checkpoints"):
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    print_results(pcfg_probing.run(args.out, budget=budget, resume=args.resume, **kwargs))


if __name__ == "__main__":
    use_compilation_cache(sys.argv[1:], DEFAULT_OUT)
    sys.exit(run_main(main))
