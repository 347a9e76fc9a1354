"""The shared training loop: build, restore, step, log, evaluate, checkpoint, plot and sample."""

from __future__ import annotations

import functools
import json
import logging
import math
import pathlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.train import data as data_lib
from icml26zoo.train.batch_source import (
    GRAIN_KEY,
    USER_KEY,
    UserBatches,
    check_batch,
    check_data_state,
    check_eval_batches,
    eval_batches,
)
from icml26zoo.train.checkpoint import Checkpointer, NonFiniteStateError, first_non_finite_leaf
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.config_checks import check_fits_data, configured_objective
from icml26zoo.train.errors import RunError
from icml26zoo.train.flops import mesh_peak_flops, train_flops_per_token
from icml26zoo.train.metrics import MetricWriter, create_writer, drop_records_after, json_safe, read_metrics
from icml26zoo.train.monitor import flagged_steps
from icml26zoo.train.plotting import plot_loss_curves
from icml26zoo.train.progress import Progress
from icml26zoo.train.resume import PriorRun, check_start, finished_message, inspect_workdir, record_start
from icml26zoo.train.runs import Run, build_run
from icml26zoo.train.sharding import global_batch
from icml26zoo.train.step import (
    TrainState,
    checkpointed,
    from_checkpoint,
    merge_model,
    plotted_metrics,
    summarize_eval,
)
from icml26zoo.train.workdir import claim_workdir
from icml26zoo.validation import check_bool

log = logging.getLogger(__name__)


class NonFiniteError(RunError, FloatingPointError):
    """The loss or the train state turned NaN or infinite; that state is never checkpointed.

    A `RunError` (the CLI prints its one-line message): it names the step, the last finite checkpoint
    and what to try.
    """

    def __init__(self, step: int, what: str, last_saved: int | None, directory: str | None) -> None:
        self.step, self.last_saved = step, last_saved
        if last_saved is None:
            saved = "no checkpoint of this run was saved" if directory else "checkpoints are off (checkpoint_every=0)"
        else:
            saved = f"the last finite checkpoint is step {last_saved} in {directory}"
        super().__init__(
            f"{what} became non-finite at step {step}; stopping without checkpointing this state ({saved}); "
            "lower optim.learning_rate, enable optim.grad_clip_norm, or check the data for bad values"
        )


class CheckpointWriteError(RunError):
    """A checkpoint could not be written (a full disk, a quota, a read-only or vanished directory).

    A `RunError` (the CLI prints its one-line message): it names the directory, the step that was not written,
    the operating system's reason and the last checkpoint that was; those already on disk are left as they are.
    """

    def __init__(self, directory: str, step: int, last_saved: int | None, error: OSError) -> None:
        self.step, self.last_saved = step, last_saved
        last = f"last good checkpoint: step {last_saved}" if last_saved is not None else "no checkpoint was saved"
        super().__init__(f"cannot write checkpoint step {step} to {directory}: {error.strerror or error}; stopping "
                         f"({last}); free space there and run again to resume from it")


def evaluate(run: Run, params: dict, batches: Iterable | None = None, *,
             variables: dict | None = None) -> dict[str, float]:
    """Loss, accuracy and bits per byte on the eval split (`eval_batches` batches, or all of it).

    `batches` replaces the config's eval split with the user's own batches (no bits per byte then).
    `variables`: the model's non-Param variables (`TrainState.variables`); None for a model without any.
    The objective's metrics are sums, so they add over batches before `summarize_eval` divides them.
    """
    config = run.config
    bytes_per_token = None
    if batches is None:
        batches = data_lib.make_eval_iterator(
            config.data, batch_size=config.batch_size, seq_len=config.seq_len, max_batches=config.eval_batches
        )
        bytes_per_token = data_lib.bytes_per_token(config.data)
    else:
        batches = _checked_eval_batches(config, batches)
    totals = {"loss_sum": 0.0, "weight": 0.0}
    for batch in batches:
        sums = run.eval_step(params, variables or {}, global_batch(run.mesh, batch))
        for name, value in jax.device_get(sums).items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return summarize_eval(totals, bytes_per_token)


def _checked_eval_batches(config: TrainConfig, batches: Iterable) -> Iterator[dict]:
    rows = config.batch_size // jax.process_count()
    for index, batch in enumerate(batches):
        check_batch(batch, index, rows=rows, seq_len=config.seq_len, vocab_size=config.model.vocab_size,
                    name="eval_data")
        yield {key: np.asarray(value) for key, value in batch.items()}


def _first_non_finite(pending: list[tuple[int, jax.Array]]) -> int | None:
    for step, loss in pending:
        if not math.isfinite(float(loss)):
            return step
    return None


def train(
    config: TrainConfig,
    workdir: str | pathlib.Path,
    *,
    stop_after: int | None = None,
    devices: list | None = None,
    data: Iterable[Mapping[str, np.ndarray]] | None = None,
    eval_data: Iterable[Mapping[str, np.ndarray]] | Callable[[], Iterable] | None = None,
    allow_config_change: bool = False,
    final_eval: bool = True,
) -> dict[str, Any]:
    """Trains `config` in `workdir`, resuming from its latest good checkpoint; returns the final summary.

    The workdir is checked and locked first, before any data or model is built: an empty, uncreatable
    or unwritable path, or one another live run holds, raises `WorkdirError` (see `train.workdir`).
    After a resume, metrics.jsonl rows past the restored step are dropped, so none is logged twice.

    A workdir's history is append-only (`train.resume`). config.json holds the config the run started with
    and is never overwritten; each start appends a line to config_history.jsonl (the step it starts from,
    the time, the fields that differ from config.json). Also before anything is built, a resume may change
    only num_steps, log_every, eval_every, eval_batches, checkpoint_every, keep_checkpoints, tensorboard,
    progress_bar, sample_length, sample_temperature, sample_top_k, spike_monitor_every, mesh_data, mesh_fsdp
    and distributed (`train.resume.SAFE_ON_RESUME`); any other difference (model, data, objective, optimizer,
    schedule, batch_size, seq_len, seed, init_from, LoRA) raises `ConfigChangeError` naming each field as
    old → new unless `allow_config_change`. A workdir that holds a run with checkpoint_every=0, or with a
    last step before its newest checkpoint, raises `WorkdirError`; a finished run (newest checkpoint at the
    last step, summary.json written) is left as it is: its stored summary comes back, marked
    "already_finished". Every start prunes the checkpoints to keep_checkpoints.

    Args:
      config: the run.
      workdir: run directory (checkpoints, metrics.jsonl, config.json, plots, summary.json).
      stop_after: end the run after that many micro-steps in total (as if interrupted), which lets tests
        and time-boxed jobs stop and later resume the same schedule.
      devices: restrict the mesh (default: all devices).
      data: the user's own training batches instead of the config's dataset: any iterable of dicts of
        numpy arrays, ``inputs``/``targets``/``segment_ids``/``positions`` int32 [b, T] and ``weights``
        float32 [b, T] (optionally ``labels`` int32 [b]), b = batch_size // process_count, T = seq_len,
        tokens < model.vocab_size (format in `train.batch_source`). Each batch is checked; the first bad
        one raises ValueError. One batch per micro-step. To resume, pass an iterable replaying the same
        stream from its start: the loop discards the batches the checkpoint had consumed.
      eval_data: with `data`, the eval batches (same format): a list, or a function returning a fresh
        iterable, read whole at every evaluation. Without it a run on `data` skips evaluation (no
        ``eval/*`` metrics; `eval_every` is ignored).
      allow_config_change: resume even when fields outside the safe list differ from config.json (the CLI's
        ``--allow-config-change``); the changes are recorded in config_history.jsonl.
      final_eval: evaluate once more after the last step (the summary's ``eval/*`` metrics). False for a caller
        that scores the finished model itself (an experiment's cell): the closing evaluation, and compiling its
        eval step, are skipped, and the summary holds no ``eval/*`` metrics. `eval_every` still applies.

    Returns:
      the final eval metrics (when the run finished) and the final `TrainState` under "state"; for a run
      that had already finished, its summary.json with the notice under "already_finished" (no "state":
      `load_run(workdir)` reopens it).

    Raises:
      WorkdirError: the workdir cannot be used or holds a run this start would overwrite (above).
      ConfigChangeError: a resume changes a field outside the safe list (above).
      NonFiniteError: the loss or state became NaN/inf; names the step and the last finite checkpoint.
      ValueError: a bad config value or a bad user batch.
    """
    check_bool("allow_config_change", allow_config_change)
    check_bool("final_eval", final_eval)
    path, lock = claim_workdir(workdir, jax.process_index())
    try:
        prior = inspect_workdir(path)
        changes = check_start(prior, config, allow_config_change=allow_config_change)
        notice = finished_message(prior, config)
        if notice is not None:
            return _already_finished(config, prior, notice)
        return _train_locked(config, prior, changes, stop_after, devices, data, eval_data, final_eval)
    finally:
        lock.release()


def _already_finished(config: TrainConfig, prior: PriorRun, notice: str) -> dict[str, Any]:
    """Prunes the finished run's checkpoints (a kill after its final save can leave one too many) and returns
    its stored summary; nothing else in the workdir changes."""
    with Checkpointer(prior.workdir / "checkpoints", keep=config.keep_checkpoints) as checkpointer:
        _prune(checkpointer, config.keep_checkpoints, None)
    log.info("%s", notice)
    summary = json.loads((prior.workdir / "summary.json").read_text())
    return {**summary, "already_finished": notice}


def _prune(checkpointer: Checkpointer, keep: int, restored: int | None) -> None:
    pruned = checkpointer.prune(keep, protect=restored)
    if pruned:
        log.info("deleted checkpoints %s beyond keep_checkpoints=%d", pruned, keep)


def _train_locked(config: TrainConfig, prior: PriorRun, changes: dict, stop_after: int | None,
                  devices: list | None, data: Iterable | None, eval_data: Any, final_eval: bool) -> dict[str, Any]:
    workdir = prior.workdir
    if data is None:
        if eval_data is not None:
            raise ValueError("eval_data is only used with data (the user's own training batches); got data=None")
        check_fits_data(config)
        data_lib.prepare(config.data)
    else:
        check_eval_batches(eval_data)
    run, state = build_run(config, devices)
    total_steps = config.num_steps * config.optim.grad_accum_steps
    iterator, state_key = _train_batches(config, data, total_steps)
    checkpointer = None
    last_saved = None
    if config.checkpoint_every:
        checkpointer = Checkpointer(workdir / "checkpoints", keep=config.keep_checkpoints)
        restored = checkpointer.restore_latest(
            checkpointed(_abstract(state, run.state_shardings)),
            check_data_state=functools.partial(check_data_state, state_key),
        )
        if restored is not None:
            last_saved, state, data_state = restored
            state = from_checkpoint(state)
            iterator.set_state(data_state)
            log.info("resumed from step %d", last_saved)
        # Collective, like every Checkpointer call: all processes prune (Orbax lets the primary delete).
        _prune(checkpointer, config.keep_checkpoints, last_saved)
    if jax.process_index() == 0:
        dropped = drop_records_after(workdir / "metrics.jsonl", int(state.step))
        if dropped:
            log.info("dropped %d metrics rows logged after step %d by the interrupted run", dropped, int(state.step))
        record_start(prior, config, changes, int(state.step))
    writer = create_writer(workdir, tensorboard=config.tensorboard)

    def run_eval(state: TrainState) -> dict[str, float]:
        if data is None:
            return evaluate(run, state.params, variables=state.variables)
        if eval_data is None:
            return {}
        return evaluate(run, state.params, eval_batches(eval_data), variables=state.variables)

    last_step = total_steps if stop_after is None else min(total_steps, stop_after)
    start = int(state.step)
    flops_per_step = train_flops_per_token(config.model, config.seq_len) * config.batch_size * config.seq_len
    peak = mesh_peak_flops(run.mesh.devices.flat, config.model.compute_dtype)
    progress = Progress(start, last_step, enabled=config.progress_bar and jax.process_index() == 0)
    pending: list[tuple[int, jax.Array]] = []
    # The objective's train diagnostics of each step since the last train record (`train.step`).
    pending_diagnostics: list[dict[str, jax.Array]] = []
    window_start, window_steps = time.perf_counter(), 0
    summary: dict[str, Any] = {}
    try:
        for step in range(start, last_step):
            batch = global_batch(run.mesh, next(iterator))
            if run.spike_monitor is not None and (step + 1) % config.spike_monitor_every == 0:
                writer.write(step + 1, jax.device_get(run.spike_monitor(state, batch)))
            state, metrics = run.train_step(state, batch)
            pending.append((step + 1, metrics["train/loss"]))
            pending_diagnostics.append({k: v for k, v in metrics.items() if not k.startswith("train/")})
            window_steps += 1
            done = step + 1
            is_last = done == last_step
            if done % config.log_every == 0 or is_last or _checkpoint_due(config, done, is_last):
                _raise_if_non_finite(pending, last_saved, checkpointer)
                # The loss is taken before the update: the update itself can overflow the parameters.
                _raise_if_non_finite_params(state, done, last_saved, checkpointer)
                values = {k: float(v) for k, v in jax.device_get(metrics).items() if k.startswith("train/")}
                values["train/loss"] = float(np.mean([float(loss) for _, loss in pending]))
                values.update(_window_means(jax.device_get(pending_diagnostics)))
                elapsed = time.perf_counter() - window_start
                values["perf/tokens_per_sec"] = window_steps * config.batch_size * config.seq_len / elapsed
                values["perf/mfu"] = window_steps * flops_per_step / elapsed / peak
                writer.write(done, values)
                progress.update(done, values)
                pending, pending_diagnostics, window_start, window_steps = [], [], time.perf_counter(), 0
            if config.eval_every and done % config.eval_every == 0 and not is_last:
                eval_metrics = run_eval(state)
                _raise_if_non_finite_eval(eval_metrics, done, last_saved, checkpointer)
                if eval_metrics:
                    writer.write(done, eval_metrics)
            if checkpointer is not None and _checkpoint_due(config, done, is_last):
                _save(checkpointer, done, state, iterator.get_state(), last_saved)
                last_saved = done
        if last_step == total_steps:
            eval_metrics = run_eval(state) if final_eval else {}
            _raise_if_non_finite_eval(eval_metrics, last_step, last_saved, checkpointer)
            summary = finish(run, state, workdir, writer, eval_metrics, builtin_data=data is None)
    finally:
        progress.close()
        writer.close()
        if checkpointer is not None:
            _finish_saves(checkpointer, last_saved)
    summary["state"] = state
    return summary


def _window_means(records: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of each diagnostic over the steps of one logging window (every step returns the same names)."""
    if not records:
        return {}
    return {name: float(np.mean([float(record[name]) for record in records])) for name in records[0]}


def _train_batches(config: TrainConfig, data: Iterable | None, total_steps: int) -> tuple[Iterator, str]:
    """The training batch source and the key of its saved state (see `train.batch_source`)."""
    if data is None:
        iterator = data_lib.make_train_iterator(
            config.data, batch_size=config.batch_size, seq_len=config.seq_len, seed=config.seed
        )
        return iterator, GRAIN_KEY
    rows = config.batch_size // jax.process_count()
    batches = UserBatches(data, rows=rows, seq_len=config.seq_len, vocab_size=config.model.vocab_size,
                          needed=total_steps)
    return batches, USER_KEY


def _checkpoint_due(config: TrainConfig, done: int, is_last: bool) -> bool:
    return bool(config.checkpoint_every) and (done % config.checkpoint_every == 0 or is_last)


def _save(checkpointer: Checkpointer, step: int, state: TrainState, data_state: dict, last_saved: int | None) -> None:
    try:
        checkpointer.save(step, checkpointed(state), data_state)
    except NonFiniteStateError as error:
        raise NonFiniteError(step, "training state", last_saved, checkpointer.directory) from error
    except OSError as error:
        # A full disk is a user error: one line naming what was and was not written, not Orbax's traceback flood.
        raise CheckpointWriteError(checkpointer.directory, step, last_saved, error) from error


def _finish_saves(checkpointer: Checkpointer, last_saved: int | None) -> None:
    """Waits for the asynchronous saves and closes the checkpointer; a write that fails in the background (a
    full disk) is a `CheckpointWriteError` naming the step being written, `last_saved`, and the newest before it."""
    try:
        checkpointer.wait()
    except OSError as error:
        if last_saved is None:  # Nothing was being written: not a failed save.
            raise
        earlier = [step for step in checkpointer.all_steps() if step < last_saved]
        raise CheckpointWriteError(checkpointer.directory, last_saved, max(earlier, default=None), error) from error
    finally:
        checkpointer.close()


def _raise_if_non_finite(pending: list[tuple[int, jax.Array]], last_saved: int | None,
                         checkpointer: Checkpointer | None) -> None:
    bad = _first_non_finite(pending)
    if bad is not None:
        directory = None if checkpointer is None else checkpointer.directory
        raise NonFiniteError(bad, "training loss", last_saved, directory)


def _raise_if_non_finite_params(state: TrainState, step: int, last_saved: int | None,
                                checkpointer: Checkpointer | None) -> None:
    """NonFiniteError when a floating parameter or model variable holds NaN or inf (checked whether or not the
    run checkpoints). One jitted reduction over the tree, compiled once per run: eager per-leaf checks compiled a
    program per leaf shape (most of a second for a small model) and, across processes, could order their
    collectives differently."""
    if first_non_finite_leaf((state.params, state.variables)) is not None:
        directory = None if checkpointer is None else checkpointer.directory
        raise NonFiniteError(step, "the parameters", last_saved, directory)


def _raise_if_non_finite_eval(metrics: dict[str, float], step: int, last_saved: int | None,
                              checkpointer: Checkpointer | None) -> None:
    """NonFiniteError when an eval metric (e.g. eval/loss) is NaN or inf."""
    bad = sorted(name for name, value in metrics.items() if not math.isfinite(value))
    if bad:
        directory = None if checkpointer is None else checkpointer.directory
        raise NonFiniteError(step, ", ".join(bad), last_saved, directory)


def _abstract(state: TrainState, shardings: TrainState) -> TrainState:
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings)


def finish(run: Run, state: TrainState, workdir: pathlib.Path, writer: MetricWriter,
           eval_metrics: dict[str, float], *, builtin_data: bool = True) -> dict[str, Any]:
    """Logs the final `eval_metrics`; baseline comparison, loss-curve plot and a generated sample.

    The loss plot adds a panel of the train diagnostics the objective lists in `plotted_metrics`. The unigram
    baseline and the sample need the config's dataset, so a run on user data skips them.
    """
    config = run.config
    done = int(state.step)
    if eval_metrics:
        writer.write(done, eval_metrics)
    summary: dict[str, Any] = dict(eval_metrics)
    if builtin_data and "eval/bits_per_byte" in eval_metrics:
        summary["eval/unigram_bits_per_byte"] = data_lib.unigram_bits_per_byte(config.data, config.data.eval_split)
    writer.flush()
    if jax.process_index() == 0:
        metrics_path = workdir / "metrics.jsonl"
        markers = flagged_steps(read_metrics(metrics_path))
        unigram = summary.get("eval/unigram_bits_per_byte")
        baselines = {} if unigram is None else {"unigram (byte frequencies)": unigram}
        summary["plot"] = plot_loss_curves(metrics_path, workdir / "loss_curve.png", markers=markers,
                                           diagnostics=plotted_metrics(configured_objective(config)),
                                           baselines=baselines)
        if config.spike_monitor_every:
            summary["spike/flagged_steps"] = markers
        if builtin_data and config.sample_length and data_lib.bytes_per_token(config.data):
            summary["sample"] = sample_text(run, state.params, config, variables=state.variables)
        # json_safe: strict JSON (a non-finite number as the string metrics.jsonl uses, not a bare NaN).
        (workdir / "summary.json").write_text(json.dumps(json_safe(summary), indent=2, allow_nan=False))
    return summary


def sample_text(run: Run, params: dict, config: TrainConfig, prompt: str = "def ", *,
                variables: dict | None = None) -> str:
    """Decodes `config.sample_length` bytes after `prompt` with the configured temperature and top-k
    (`variables`: the model's non-Param variables, None when it has none)."""
    from icml26zoo.models import generate

    model = merge_model(run.graphdef, jax.device_get(params), jax.device_get(variables))
    prompt_tokens = jnp.asarray(data_lib.encode(prompt), jnp.int32)[None, :]
    tokens = generate(
        model,
        prompt_tokens,
        max_new_tokens=config.sample_length,
        key=jax.random.key(config.seed),
        temperature=config.sample_temperature,
        top_k=config.sample_top_k,
    )
    return prompt + data_lib.decode(np.asarray(tokens[0]))
