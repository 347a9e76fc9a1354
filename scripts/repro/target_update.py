"""Target update periods in Q-learning: constant K vs the adaptive K_n = ⌈K_0 γ^{−2n/3}⌉, tabular and CartPole.

    python scripts/repro/target_update.py --out runs/repro/target_update [--quick] [--tabular-periods 100,3000]
                                          [--adaptive-k0 30] [--cartpole-periods 100,500] [--cartpole-k0 100]
                                          [--eps 0.3,0.1,0.03] [--decay-k0 30] [--eval-episodes 10]
                                          [--steps 20000] [--batch-size 64] [--seq-len 2000] [--seeds 0,1,2] [--resume]

No language model is trained: --steps is CartPole environment steps per cell, --batch-size the DQN minibatch,
--seq-len the tabular samples per cell in thousands (see icml26zoo.repro.target_update). Finished cells in
--out are reused.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import target_update
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def _ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def _floats(flag: str, text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/target_update")
    parser.add_argument("--tabular-periods", default="100,1000,3000,10000,30000", help="constant periods K (tabular)")
    parser.add_argument("--adaptive-k0", type=int, default=30, help="K_0 of the tabular adaptive schedule")
    parser.add_argument("--cartpole-periods", default="100,500", help="constant periods K (CartPole DQN)")
    parser.add_argument("--cartpole-k0", type=int, default=100, help="K_0 of the CartPole adaptive schedule")
    parser.add_argument("--eps", default="0.3,0.1,0.03", help="thresholds ε of the sample counts and the fit")
    parser.add_argument("--decay-k0", type=float, default=30.0, help="k_0 of the tabular inner step 1/(1 + k/k_0)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="greedy CartPole episodes per cell")
    args, budget = parse_budget(parser, argv, quick=target_update.QUICK, full=target_update.FULL)
    results = target_update.run(
        args.out, budget=budget, tabular_periods=_ints("--tabular-periods", args.tabular_periods),
        adaptive_k0=args.adaptive_k0, cartpole_periods=_ints("--cartpole-periods", args.cartpole_periods),
        cartpole_k0=args.cartpole_k0, eps=_floats("--eps", args.eps), decay_k0=args.decay_k0,
        eval_episodes=args.eval_episodes, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
