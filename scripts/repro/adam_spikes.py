"""Adam loss spikes at a constant learning rate: stages of the spike and the directional-curvature predictor.

    python scripts/repro/adam_spikes.py --out runs/repro/adam_spikes [--quick] [--settings quadratic,mlp]
                                        [--b2 0.99] [--eps 1e-8] [--noise 1e-6] [--quadratic-lr 1e-2]
                                        [--mlp-lr 1e-3] [--power-iters 5] [--spike-factor 100]
                                        [--steps 4000] [--batch-size 32] [--seq-len 4] [--seeds 0,1,2]

No zoo model is trained: --steps is the number of Adam steps, --batch-size the MLP's mini-batch, --seq-len the
quadratic's dimension (see icml26zoo.repro.adam_spikes).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from icml26zoo.repro import adam_spikes
from icml26zoo.repro.cli import budget_parser, parse_budget, print_results, run_main


def main(argv: Sequence[str] | None = None) -> None:
    parser = budget_parser(__doc__.splitlines()[0], default_out="runs/repro/adam_spikes")
    parser.add_argument("--settings", default=",".join(adam_spikes.SETTINGS),
                        help=f"comma-separated, of {adam_spikes.SETTINGS}")
    parser.add_argument("--b2", type=float, default=0.99, help="Adam's β2")
    parser.add_argument("--eps", type=float, default=1e-8, help="Adam's ε")
    parser.add_argument("--noise", type=float, default=1e-6, help="the quadratic's gradient-noise std")
    parser.add_argument("--quadratic-lr", type=float, default=1e-2, help="constant learning rate, quadratic")
    parser.add_argument("--mlp-lr", type=float, default=1e-3, help="constant learning rate, MLP")
    parser.add_argument("--power-iters", type=int, default=5, help="warm-started power iterations per step")
    parser.add_argument("--spike-factor", type=float, default=100.0, help="loss / baseline at a spike onset")
    args, budget = parse_budget(parser, argv, quick=adam_spikes.QUICK, full=adam_spikes.FULL)
    results = adam_spikes.run(args.out, budget=budget, settings=tuple(args.settings.split(",")), b2=args.b2,
                              eps=args.eps, noise=args.noise, quadratic_lr=args.quadratic_lr, mlp_lr=args.mlp_lr,
                              power_iters=args.power_iters, spike_factor=args.spike_factor, resume=args.resume)
    print_results(results)


if __name__ == "__main__":
    sys.exit(run_main(main))
