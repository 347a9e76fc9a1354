"""RL with process rewards vs SFT (with and without teacher forcing) on k-PARITY chains (arXiv 2511.17852).

    python scripts/repro/rl_vs_sft.py --out /tmp/repro_rl_vs_sft               # the FULL budget
    python scripts/repro/rl_vs_sft.py --quick --out /tmp/rl_vs_sft_quick      # a short smoke run
    python scripts/repro/rl_vs_sft.py --modes rl,free_running --num-bits 16 --sparsity 4 --steps 3000

See docs/papers/rl_vs_sft_boolean.md and icml26zoo.repro.rl_vs_sft.run for the experiment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import rl_vs_sft
from icml26zoo.repro.cli import budget_parser, comma_list, parse_budget, print_results, run_main

DEFAULT_OUT = "runs/repro/rl_vs_sft"


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out=DEFAULT_OUT)
    parser.add_argument("--modes", help=f"comma-separated, from {','.join(rl_vs_sft.MODES)} (default: all)")
    parser.add_argument("--num-bits", type=int, default=rl_vs_sft.NUM_BITS, help="input bits d")
    parser.add_argument("--sparsity", type=int, default=rl_vs_sft.SPARSITY, help="support size k (3: 3-PARITY)")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between step-accuracy evaluations")
    parser.add_argument("--learning-rate", type=float, help="Adam learning rate of every mode (default: the presets')")
    parser.add_argument("--d-model", type=int, default=rl_vs_sft.D_MODEL, help="model width (MLP 4 x width)")
    args, budget = parse_budget(parser, argv, quick=rl_vs_sft.QUICK, full=rl_vs_sft.FULL)
    modes = rl_vs_sft.MODES if args.modes is None else comma_list("--modes", args.modes)
    results = rl_vs_sft.run(args.out, budget=budget, modes=modes, num_bits=args.num_bits, sparsity=args.sparsity,
                            eval_every=args.eval_every, learning_rate=args.learning_rate, d_model=args.d_model,
                            resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
