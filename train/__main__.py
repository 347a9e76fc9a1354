"""Command line: `python -m icml26zoo.train --config configs/<preset>.py --workdir DIR [key=value ...]`."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m icml26zoo.train", description=__doc__)
    parser.add_argument("--config", required=True, help="preset file defining get_config()")
    parser.add_argument("--workdir", required=True, help="run directory (metrics, checkpoints, plots)")
    parser.add_argument("--coordinator", help="multi-host: coordinator host:port for jax.distributed")
    parser.add_argument("--num-processes", type=int, help="multi-host: number of processes")
    parser.add_argument("--process-id", type=int, help="multi-host: this process's index")
    parser.add_argument("overrides", nargs="*", help="config overrides such as model.num_layers=2")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # Our own messages at INFO; absl, orbax and TFDS stay at WARNING so the progress bar stays readable.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("train").setLevel(logging.INFO)
    from icml26zoo.train.config import apply_overrides, load_preset
    from icml26zoo.train.distributed import initialize_distributed

    try:
        config = apply_overrides(load_preset(args.config), args.overrides)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    initialize_distributed(config.distributed, args.coordinator, args.num_processes, args.process_id)
    from icml26zoo.train.loop import train
    from icml26zoo.train.report import print_summary

    summary = train(config, args.workdir)
    print_summary(summary, args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
