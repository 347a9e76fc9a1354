"""Building a run's state and reopening a run from its workdir: `build_run` (the sharded initial state and the
jitted steps), and `load_run` (the config a run trained, the model with its trained parameters, its state).

The two live together because they call each other: a run started with `init_from` loads another run, and
loading a run builds its abstract state.

A run writes `config.json` (`TrainConfig.to_json`) and checkpoints under `<workdir>/checkpoints/`;
`load_run` reads both back, so a notebook or script can evaluate, sample from or fine-tune a trained model
without repeating the run's command line. Loading never disturbs a run that is still training there: the
checkpoints are opened read-only (nothing in the workdir is created, cleaned up or deleted), the newest
*committed* step is loaded, and one log line says when a newer step is still being written.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.lora import add_lora
from icml26zoo.models import build_model
from icml26zoo.train.checkpoint import Checkpointer, CheckpointRestoreError, steps_in_flight
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.config_checks import configured_objective
from icml26zoo.train.errors import CheckpointError, RunError
from icml26zoo.train.monitor import make_spike_monitor
from icml26zoo.train.optim import (
    build_optimizer,
    check_lora_rank,
    custom_update,
    learning_rate_schedule,
    lora_trainable,
    train_only,
)
from icml26zoo.train.sharding import make_mesh, tree_shardings
from icml26zoo.train.step import (
    TrainState,
    checkpointed,
    from_checkpoint,
    make_eval_step,
    make_train_step,
    merge_model,
    split_model,
)
from icml26zoo.train.workdir import live_holder

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Run:
    """The compiled pieces of one run, shared by the loop, evaluation and the tests."""

    config: TrainConfig
    mesh: jax.sharding.Mesh
    graphdef: nnx.GraphDef
    state_shardings: TrainState
    train_step: Any
    eval_step: Any
    spike_monitor: Any = None


def build_run(config: TrainConfig, devices: list | None = None, *, initialize: bool = True) -> tuple[Run, TrainState]:
    """Initializes parameters and optimizer state directly into their shardings and jits the steps.

    `devices` defaults to every device of every process. With `initialize=False` the state comes back abstract
    (`jax.ShapeDtypeStruct` leaves carrying their shardings) and nothing is compiled or allocated for it: what a
    restore needs as its template (`load_run`).
    """
    mesh = make_mesh(config.mesh_data, config.mesh_fsdp, devices)
    make_model = functools.partial(build_train_model, config)
    graphdef, abstract_params, abstract_variables = split_model(nnx.eval_shape(make_model))
    optimizer = build_optimizer(config.optim, config.num_steps)
    if config.lora_rank:
        optimizer = train_only(optimizer, lora_trainable)
    source = None
    if config.init_from is not None:
        source = initial_params(config.init_from, abstract_params)
    schedule = learning_rate_schedule(config.optim, config.num_steps)
    abstract_opt = jax.eval_shape(optimizer.init, abstract_params)
    objective = configured_objective(config)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    shardings = TrainState(
        step=replicated,
        params=tree_shardings(mesh, abstract_params),
        opt_state=tree_shardings(mesh, abstract_opt),
        rng=replicated,
        # Model variables (prototype banks, running statistics) are small: every device holds them whole.
        variables=jax.tree.map(lambda _: replicated, abstract_variables),
    )

    def init(source: dict | None) -> TrainState:
        _, params, variables = split_model(make_model())
        if source is not None:  # init_from: the other run's weights, LoRA factors from this run's seed
            params = jax.tree.map(lambda fresh, loaded: fresh if loaded is None else loaded, params, source)
        key = jax.random.key_data(jax.random.key(config.seed))
        return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params), key, variables)

    if initialize:
        state = jax.jit(init, out_shardings=shardings)(source)
    else:
        state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                             jax.eval_shape(init, source), shardings)
    train_step = jax.jit(
        make_train_step(
            graphdef, objective, optimizer, schedule, config.optim.grad_accum_steps, custom_update(config.optim)
        ),
        in_shardings=(shardings, None),
        out_shardings=(shardings, replicated),
        donate_argnums=0,
    )
    eval_step = jax.jit(
        make_eval_step(graphdef, objective, config.seed), in_shardings=(shardings.params, shardings.variables, None),
        out_shardings=replicated,
    )
    spike_monitor = None
    if config.spike_monitor_every:
        spike_monitor = jax.jit(
            make_spike_monitor(graphdef, objective, schedule, config.optim), in_shardings=(shardings, None),
            out_shardings=replicated,
        )
    return Run(config, mesh, graphdef, shardings, train_step, eval_step, spike_monitor), state


def build_train_model(config: TrainConfig) -> nnx.Module:
    """The run's model: `config.model` initialized from `config.seed`, with LoRA adapters when
    `config.lora_rank` > 0 (their A factors drawn from a separate stream, so the base weights equal the
    plain model's). The rank must not exceed any adapted layer's width (ValueError naming lora_rank)."""
    model = build_model(config.model, rngs=nnx.Rngs(config.seed))
    if not config.lora_rank:
        return model
    check_lora_rank(model, config.lora_rank, config.lora_targets)
    alpha = 2.0 * config.lora_rank if config.lora_alpha is None else config.lora_alpha
    return add_lora(model, rank=config.lora_rank, alpha=alpha, targets=config.lora_targets,
                    rngs=nnx.Rngs(params=jax.random.fold_in(jax.random.key(config.seed), 1)), copy=False)


def load_run(
    workdir: str | pathlib.Path, step: int | None = None, *, devices: list | None = None
) -> tuple[TrainConfig, nnx.Module, TrainState]:
    """The config, model and `TrainState` of the run in `workdir`, at its newest readable checkpoint or `step`.

    The model is the run's NNX model with the restored parameters merged in, ready to call; the state
    holds the parameters, optimizer state, step counter and RNG key data, laid out on the run's mesh
    rebuilt over `devices` (default: all devices).

    A run may still be training in `workdir`: nothing there is created, cleaned up or deleted, the newest
    committed checkpoint is loaded (a step the run prunes while it is read is replaced by its newer one),
    and a newer step still being written is logged in one warning line.

    Example::

        from icml26zoo.train import load_run

        config, model, state = load_run("runs/tiny")   # newest checkpoint
        logits = model(tokens)                          # tokens [B, T] int32 -> logits [B, T, vocab_size]
        _, old_model, _ = load_run("runs/tiny", step=25)

    Raises:
      CheckpointError: the workdir does not exist, has no config.json, no checkpoint (or none committed
        yet by the run training there), no checkpoint at `step`, or none that can be read; the message
        names the workdir and what is missing.
      RunError: config.json does not describe a valid config (names the file and the field).
    """
    workdir = pathlib.Path(workdir)
    # Read first: a run that starts or ends during the load only makes the messages below less specific.
    writer = live_holder(workdir)
    config = read_config(workdir, writer)
    directory = workdir / "checkpoints"
    if not directory.is_dir():
        if writer is not None:
            raise CheckpointError(f"workdir {str(workdir)!r} has no committed checkpoint yet (the run training "
                                  f"there, {writer}, has not saved one)")
        raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoints/ folder (the run saved none: "
                              f"checkpoint_every={config.checkpoint_every})")
    with Checkpointer(directory, read_only=True) as checkpointer:
        check_step(checkpointer, step, workdir, writer)
        # A fine-tune's checkpoint holds every parameter: its init_from run is not needed to reopen it. The template
        # is abstract: initializing a state only to overwrite it cost a compile of the model's init.
        run, abstract = build_run(dataclasses.replace(config, init_from=None), devices, initialize=False)
        state = restore(checkpointer, abstract, step, workdir)
    report_in_flight(workdir, int(state.step), writer)
    model = merge_model(run.graphdef, state.params, state.variables)
    return config, model, state


def read_config(workdir: pathlib.Path, writer: str | None = None) -> TrainConfig:
    """The TrainConfig in `<workdir>/config.json`; CheckpointError when missing, RunError when invalid.

    `writer` names the run holding the workdir's lock (`live_holder`), for the message when a starting run
    has not written config.json yet.
    """
    if not workdir.is_dir():
        raise CheckpointError(f"workdir {str(workdir)!r} does not exist or is not a directory")
    path = workdir / "config.json"
    if not path.is_file():
        if writer is not None:
            raise CheckpointError(f"workdir {str(workdir)!r} has no config.json yet (the run training there, "
                                  f"{writer}, is starting)")
        raise CheckpointError(f"workdir {str(workdir)!r} has no config.json (not the workdir of a training run)")
    try:
        return TrainConfig.from_json(path.read_text())
    except ValueError as error:
        raise RunError(f"{path}: {error}") from None


def check_step(checkpointer: Checkpointer, step: int | None, workdir: pathlib.Path, writer: str | None = None) -> None:
    """CheckpointError unless the checkpoints hold `step` (None: any step), before anything is built."""
    steps = checkpointer.all_steps()
    if not steps and writer is not None:
        raise CheckpointError(f"workdir {str(workdir)!r} has no committed checkpoint yet (the run training there, "
                              f"{writer}, has not finished its first save)")
    if not steps:
        raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint in {checkpointer.directory}")
    if step is not None and step not in steps:
        raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint at step {step}; it has steps {steps}")


def restore(checkpointer: Checkpointer, abstract: TrainState, step: int | None, workdir: pathlib.Path) -> TrainState:
    """The state of checkpoint `step` (None: the newest readable one) shaped like `abstract`."""
    if step is None:
        try:
            restored = checkpointer.restore_latest(checkpointed(abstract))
        except CheckpointRestoreError as error:
            raise CheckpointError(f"workdir {str(workdir)!r}: {error}") from None
        if restored is None:
            raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint in {checkpointer.directory}")
        return from_checkpoint(restored[1])
    try:
        state, _ = checkpointer.restore(step, checkpointed(abstract))
    except CheckpointRestoreError as error:
        raise CheckpointError(f"workdir {str(workdir)!r}: {error}") from None
    return from_checkpoint(state)


def report_in_flight(workdir: pathlib.Path, loaded: int, writer: str | None) -> None:
    """Logs one warning line when a step newer than `loaded` is still being written (or was cut short)."""
    newer = [s for s in steps_in_flight(workdir / "checkpoints") if s > loaded]
    if not newer:
        return
    if writer is not None:
        log.warning("workdir %s: loaded step %d, the newest committed one; step %d is still being written by the "
                    "run training there (%s)", workdir, loaded, newer[-1], writer)
    else:
        log.warning("workdir %s: loaded step %d; the save of step %d was cut short (no run holds the workdir; "
                    "its next start removes the leftover)", workdir, loaded, newer[-1])


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
