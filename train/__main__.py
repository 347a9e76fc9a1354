"""Command line: `python -m icml26zoo.train --config NAME_OR_FILE --workdir DIR [key=value ...]`.

`--config` takes a preset name (`llama_tiny`, see `icml26zoo.configs.names()`) or a preset file. A user
error (a bad value or name, a mesh that does not fit the devices, a dataset that is not prepared, a
locked or unwritable workdir, a run that diverged) prints one line `error: ...` and exits with status 2;
`--debug` shows the traceback instead. Other exceptions are bugs and keep their traceback.

Running again on the same `--workdir` resumes the run. A resume may change only the fields that leave what the
run trains as it was (num_steps, the log/eval/checkpoint cadences, keep_checkpoints, eval_batches, the sample,
tensorboard, progress_bar, spike_monitor_every, the mesh; `icml26zoo.train.resume`); any other change (model,
data, objective, optimizer, schedule, batch_size, seq_len, seed, ...) is refused naming each field as
old -> new, unless `--allow-config-change`. Allowed changes go to `<workdir>/config_history.jsonl`; config.json
keeps the config the run started with. A finished run started again with the same num_steps does nothing.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icml26zoo.train.config import TrainConfig


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m icml26zoo.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="preset name (e.g. llama_tiny) or file defining get_config()")
    parser.add_argument("--workdir", required=True, help="run directory (metrics, checkpoints, plots)")
    parser.add_argument("--coordinator", help="multi-host: coordinator host:port for jax.distributed")
    parser.add_argument("--num-processes", type=int, help="multi-host: number of processes")
    parser.add_argument("--process-id", type=int, help="multi-host: this process's index")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of a user error")
    parser.add_argument("--verbose", action="store_true", help="keep TFDS, absl, grain and Orbax log lines")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="resume even if the model, data, optimizer or another field that changes what the run "
                             "trains differs from the workdir's config.json (recorded in config_history.jsonl)")
    parser.add_argument("overrides", nargs="*", help="config overrides such as model.num_layers=2")
    return parser.parse_args(argv)


def one_line(error: BaseException) -> str:
    """`error: <message>` on a single line (TFDS and Orbax messages can span several)."""
    return "error: " + " ".join(str(error).split())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from icml26zoo.train.logs import configure_logs

    configure_logs(verbose=args.verbose)
    from icml26zoo.configs import load_preset
    from icml26zoo.extras import MissingExtraError
    from icml26zoo.train.config import apply_overrides
    from icml26zoo.train.config_checks import check_extras
    from icml26zoo.train.distributed import initialize_distributed
    from icml26zoo.train.errors import RunError

    try:
        # Every name, option and value is checked here, before any device, dataset or file is touched.
        config = apply_overrides(load_preset(args.config, field="--config"), args.overrides)
        check_extras(config, what=f"--config {args.config}")
        initialize_distributed(config.distributed, args.coordinator, args.num_processes, args.process_id)
        check_fits(config)
    except (ValueError, MissingExtraError) as error:
        if args.debug:
            raise
        print(one_line(error), file=sys.stderr)
        return 2
    from icml26zoo.train.loop import train
    from icml26zoo.train.report import print_summary

    try:
        summary = train(config, args.workdir, allow_config_change=args.allow_config_change)
    except RunError as error:
        if args.debug:
            raise
        print(one_line(error), file=sys.stderr)
        return 2
    if "already_finished" in summary:
        # train() logged the one-line notice; the stored results were printed when the run finished.
        return 0
    print_summary(summary, args.workdir)
    return 0


def check_fits(config: TrainConfig) -> None:
    """The model against the dataset, the data directory, the mesh and batch size against this machine's devices,
    and the model against its options and this machine's memory (RunError): every check that would otherwise
    fail inside `train()` or after it."""
    import jax

    from icml26zoo.train.config_checks import check_data_dir, check_fits_data
    from icml26zoo.train.fits import check_fits_model
    from icml26zoo.train.sharding import check_fits_devices

    check_fits_data(config)
    check_data_dir(config)
    check_fits_devices(config.mesh_data, config.mesh_fsdp, config.batch_size, jax.device_count())
    check_fits_model(config)


if __name__ == "__main__":
    sys.exit(main())
