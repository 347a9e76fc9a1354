"""Reopening a run from its workdir: the config it trained, the model with its trained parameters, its state.

A run writes `config.json` (`TrainConfig.to_json`) and checkpoints under `<workdir>/checkpoints/`;
`load_run` reads both back, so a notebook or script can evaluate, sample from or fine-tune a trained model
without repeating the run's command line. Load from a run that has finished or stopped: opening the
checkpoints clears the temporary folders of interrupted saves, which a live run may still be writing.
"""

from __future__ import annotations

import pathlib

import jax
from flax import nnx

from icml26zoo.train.checkpoint import Checkpointer, CheckpointRestoreError
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.errors import CheckpointError, RunError
from icml26zoo.train.loop import build_run
from icml26zoo.train.step import TrainState


def load_run(
    workdir: str | pathlib.Path, step: int | None = None, *, devices: list | None = None
) -> tuple[TrainConfig, nnx.Module, TrainState]:
    """The config, model and `TrainState` of the run in `workdir`, at its newest readable checkpoint or `step`.

    The model is the run's NNX model with the restored parameters merged in, ready to call; the state
    holds the parameters, optimizer state, step counter and RNG key data, laid out on the run's mesh
    rebuilt over `devices` (default: all devices).

    Example::

        from icml26zoo.train import load_run

        config, model, state = load_run("runs/tiny")   # newest checkpoint
        logits = model(tokens)                          # tokens [B, T] int32 -> logits [B, T, vocab_size]
        _, old_model, _ = load_run("runs/tiny", step=25)

    Raises:
      CheckpointError: the workdir has no config.json, no checkpoint, no checkpoint at `step`, or none
        that can be read; the message names the workdir and what is missing.
      RunError: config.json does not describe a valid config (names the file and the field).
    """
    workdir = pathlib.Path(workdir)
    config = read_config(workdir)
    directory = workdir / "checkpoints"
    if not directory.is_dir():
        raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoints/ folder (the run saved none: "
                              f"checkpoint_every={config.checkpoint_every})")
    with Checkpointer(directory, keep=config.keep_checkpoints, async_save=False) as checkpointer:
        check_step(checkpointer, step, workdir)
        run, fresh = build_run(config, devices)
        abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), fresh,
                                run.state_shardings)
        # Freed now: the restored state takes its place on the devices.
        del fresh
        state = restore(checkpointer, abstract, step, workdir)
    model = nnx.merge(run.graphdef, state.params)
    return config, model, state


def read_config(workdir: pathlib.Path) -> TrainConfig:
    """The TrainConfig in `<workdir>/config.json`; CheckpointError when missing, RunError when invalid."""
    path = workdir / "config.json"
    if not path.is_file():
        raise CheckpointError(f"workdir {str(workdir)!r} has no config.json (not the workdir of a training run)")
    try:
        return TrainConfig.from_json(path.read_text())
    except ValueError as error:
        raise RunError(f"{path}: {error}") from None


def check_step(checkpointer: Checkpointer, step: int | None, workdir: pathlib.Path) -> None:
    """CheckpointError unless the checkpoints hold `step` (None: any step), before anything is built."""
    steps = checkpointer.all_steps()
    if not steps:
        raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint in {checkpointer.directory}")
    if step is not None and step not in steps:
        raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint at step {step}; it has steps {steps}")


def restore(checkpointer: Checkpointer, abstract: TrainState, step: int | None, workdir: pathlib.Path) -> TrainState:
    """The state of checkpoint `step` (None: the newest readable one) shaped like `abstract`."""
    if step is None:
        try:
            restored = checkpointer.restore_latest(abstract)
        except CheckpointRestoreError as error:
            raise CheckpointError(f"workdir {str(workdir)!r}: {error}") from None
        if restored is None:
            raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint in {checkpointer.directory}")
        return restored[1]
    try:
        state, _ = checkpointer.restore(step, abstract)
    except CheckpointRestoreError as error:
        raise CheckpointError(f"workdir {str(workdir)!r}: {error}") from None
    return state
