"""Reopening a run from its workdir: the config it trained, the model with its trained parameters, its state.

A run writes `config.json` (`TrainConfig.to_json`) and checkpoints under `<workdir>/checkpoints/`;
`load_run` reads both back, so a notebook or script can evaluate, sample from or fine-tune a trained model
without repeating the run's command line. Load from a run that has finished or stopped: opening the
checkpoints clears the temporary folders of interrupted saves, which a live run may still be writing.
"""

from __future__ import annotations

import dataclasses
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
        # A fine-tune's checkpoint holds every parameter: its init_from run is not needed to reopen it.
        run, fresh = build_run(dataclasses.replace(config, init_from=None), devices)
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


def initial_params(init_from: str | pathlib.Path, abstract_params: dict) -> dict:
    """`init_from`'s newest parameters laid out like `abstract_params` (a pure dict of ShapeDtypeStructs),
    host arrays; leaves that the source cannot have (LoRA factors) are None.

    A LoRA model's `<layer>/base/kernel` takes the source's `<layer>/kernel`. Every source parameter must
    land on a leaf of the same shape and every non-LoRA leaf must get one; otherwise ValueError naming
    init_from, the first missing or mismatched path and the shapes.

    Raises:
      CheckpointError: init_from is not a run directory with a readable checkpoint (names it).
      ValueError: the parameters do not fit (above).
    """
    try:
        _, _, state = load_run(init_from, devices=jax.devices()[:1])
    except CheckpointError as error:
        raise CheckpointError(f"init_from: {error}") from None
    source = {_path(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(
        jax.device_get(state.params))[0]}
    used: set[str] = set()

    def pick(path: tuple, target: jax.ShapeDtypeStruct) -> object:
        name = _path(path)
        if name.rsplit("/", 1)[-1] in LORA_LEAVES:
            return None
        key = "/".join(part for part in name.split("/") if part != "base")
        if key not in source:
            raise ValueError(f"init_from {str(init_from)!r} has no parameter {key!r} (the run's model differs: "
                             f"it has {sorted(source)[:6]}...)")
        if tuple(source[key].shape) != tuple(target.shape):
            raise ValueError(f"init_from {str(init_from)!r}: parameter {key!r} has shape {source[key].shape}, "
                             f"this run's model needs {tuple(target.shape)}")
        used.add(key)
        return source[key].astype(target.dtype)

    params = jax.tree_util.tree_map_with_path(pick, abstract_params)
    unused = sorted(set(source) - used)
    if unused:
        raise ValueError(f"init_from {str(init_from)!r} has parameters this run's model lacks, e.g. {unused[:4]}")
    return params


LORA_LEAVES = ("lora_a", "lora_b")


def _path(path: tuple) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)
