"""Checks of a TrainConfig that look beyond single fields: registered names, options, finite numbers,
the dataset's vocabulary and row length. `load_preset` and `apply_overrides` (train.config) run
`check_config`, so a bad name fails when the config is loaded, before any data or device is touched;
the CLI adds `check_fits_data` before it trains. `objective_options` validates `TrainConfig.objective_options`
against the options an objective declares, and `configured_objective` is the objective the trainer calls.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from icml26zoo.train.errors import RunError

if TYPE_CHECKING:
    from icml26zoo.train.config import TrainConfig


def check_finite_floats(prefix: str, config: Any) -> None:
    """Raises ValueError naming the field when a float field of dataclass `config` (or a float inside a
    tuple field, such as an option value) is infinite or NaN. `prefix` is the config's dotted path."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        numbers = _floats(value)
        if any(not math.isfinite(number) for number in numbers):
            raise ValueError(f"{prefix + '.' if prefix else ''}{field.name} must be finite, got {value!r}")


def _floats(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, tuple):
        return [number for item in value for number in _floats(item)]
    return []


def check_config(config: TrainConfig) -> None:
    """`check_names` and finite model numbers: what `load_preset` and `apply_overrides` check.

    Raises RunError (or ValueError) naming the field.
    """
    check_finite_floats("model", config.model)
    check_names(config)


def check_lora(config: TrainConfig) -> None:
    """lora_rank an integer >= 0, lora_alpha None or > 0, lora_targets non-empty strings, init_from None or a
    non-empty path; ValueError naming the field. The rank against the layer widths is checked when the model
    is built (`train.loop.build_run`)."""
    rank = config.lora_rank
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"lora_rank must be an integer >= 0 (0: no LoRA), got {rank!r}")
    alpha = config.lora_alpha
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha > 0):
        raise ValueError(f"lora_alpha must be a number > 0 or None (alpha = 2 * lora_rank), got {alpha!r}")
    targets = config.lora_targets
    if not isinstance(targets, tuple) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise ValueError(f"lora_targets must be a non-empty tuple of layer-name patterns, got {targets!r}")
    if config.init_from is not None and (not isinstance(config.init_from, str) or not config.init_from):
        raise ValueError(f"init_from must be a run directory or None, got {config.init_from!r}")


def check_fits_data(config: TrainConfig) -> None:
    """The model's vocabulary against the dataset's and the row length against what the dataset needs.

    Nothing is read or built (the dataset's entry answers from the config). The CLI checks this before
    `train()`, which checks it again; a config may be fixed by later overrides, so loading does not.
    """
    from icml26zoo.train.data.registry import dataset_for

    dataset = dataset_for(config.data)
    needed = dataset.vocab_size(config.data)
    if config.model.vocab_size < needed:
        raise RunError(f"model.vocab_size must be at least the dataset's vocabulary ({needed}) for data.name="
                       f"{config.data.name!r}, got {config.model.vocab_size}")
    dataset.check_seq_len(config.data, config.seq_len)


def check_names(config: TrainConfig) -> None:
    """Raises RunError naming the field and the valid values unless every name `config` uses is registered.

    Checked: model.name, model.mixer and the mixer's options (the mixer is built abstractly, so nothing is
    allocated and no device is touched), optim.name and its options, objective and data.name.
    """
    import jax
    from flax import nnx

    from icml26zoo.registry import MIXERS, MODELS, OBJECTIVES, OPTIMIZERS
    from icml26zoo.train.data.registry import check_dataset_name
    from icml26zoo.train.optim import build_optimizer

    named = (("model.name", config.model.name, MODELS), ("model.mixer", config.model.mixer, MIXERS),
             ("optim.name", config.optim.name, OPTIMIZERS), ("objective", config.objective, OBJECTIVES))
    for field, value, registry in named:
        if value not in registry:
            raise RunError(f"{field} must be one of {registry.names()}, got {value!r}")
    check_dataset_name("data.name", config.data.name)
    mixer = MIXERS.get(config.model.mixer)
    try:
        nnx.eval_shape(lambda: mixer(config.model, rngs=nnx.Rngs(0)))
    except ValueError as error:
        raise RunError(_naming("model.mixer_options", error)) from None

    def build() -> tuple[()]:
        build_optimizer(config.optim, config.num_steps)
        return ()

    # Under eval_shape: some optimizers compute constants when built, which would start the backend before
    # jax.distributed.initialize (which must come first).
    try:
        jax.eval_shape(build)
    except ValueError as error:
        raise RunError(_naming("optim.options", error)) from None


def _naming(field: str, error: ValueError) -> str:
    # A component's own message names its option ("unknown fox mixer option 'x'") but not the config field
    # holding it; messages that already start with a config path keep it.
    message = str(error)
    return message if message.startswith(("model.", "optim.")) else f"{field}: {message}"


def objective_options(objective: str, pairs: Any) -> Any:
    """The typed options of registered objective `objective` from (name, value) pairs, or None.

    An objective that takes options declares a frozen dataclass as its attribute `options_class`; its
    options are that class built from `pairs` (defaults for what is not given). ValueError naming
    objective_options for: pairs that are not (name, value) pairs, an unknown name (listing the valid ones),
    an ill-typed or out-of-range value, or any pair given to an objective that declares no options.
    """
    from icml26zoo.layers.options import build_options
    from icml26zoo.registry import OBJECTIVES
    from icml26zoo.validation import check_pairs

    check_pairs("objective_options", pairs)
    options_class = getattr(OBJECTIVES.get(objective), "options_class", None)
    if options_class is None:
        if pairs:
            raise ValueError(f"objective_options: objective {objective!r} takes no options, got {pairs!r}")
        return None
    try:
        return build_options(options_class, pairs, owner=f"{objective} objective")
    except ValueError as error:
        raise ValueError(f"objective_options: {error}") from None


def configured_objective(config: TrainConfig) -> Callable[..., Any]:
    """`objective(model, batch, rng) -> (loss, metrics)`: the run's objective with its options bound
    (`options=` keyword) when it declares any."""
    from icml26zoo.registry import OBJECTIVES

    objective = OBJECTIVES.get(config.objective)
    options = objective_options(config.objective, config.objective_options)
    return objective if options is None else functools.partial(objective, options=options)
