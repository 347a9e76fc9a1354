"""What a run needs from a checked config beyond its fields: the model against the dataset
(`check_fits_data`: vocabulary and row length, which the CLI checks before it trains) and the objective the
trainer calls with its options bound (`configured_objective`). The config's own checks (names, options, finite
numbers: `check_config`) live in `train.config`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from icml26zoo.extras import require_extras
from icml26zoo.registry import MIXERS, MODELS, OBJECTIVES, OPTIMIZERS
from icml26zoo.train.config import TrainConfig, objective_options
from icml26zoo.train.datasets import dataset_extras, dataset_for
from icml26zoo.train.errors import RunError


def required_extras(config: TrainConfig) -> tuple[str, ...]:
    """The optional extras a run needs: those its model, mixer, optimizer, objective and dataset declared at
    registration (sorted, without repeats)."""
    declared = (*MODELS.extras(config.model.name), *MIXERS.extras(config.model.mixer),
                *OPTIMIZERS.extras(config.optim.name), *OBJECTIVES.extras(config.objective),
                *dataset_extras(config.data))
    return tuple(sorted(set(declared)))


def check_extras(config: TrainConfig, *, what: str) -> None:
    """MissingExtraError (one line with the pip command) unless every extra the run needs is installed; `what`
    names the run for the message (e.g. "--config nc_digits")."""
    require_extras(*required_extras(config), what=what)


def check_fits_data(config: TrainConfig) -> None:
    """The model's vocabulary against the dataset's and the row length against what the dataset needs.

    Nothing is read or built (the dataset's entry answers from the config). The CLI checks this before
    `train()`, which checks it again; a config may be fixed by later overrides, so loading does not.
    """
    dataset = dataset_for(config.data)
    needed = dataset.vocab_size(config.data)
    if config.model.vocab_size < needed:
        raise RunError(f"model.vocab_size must be at least the dataset's vocabulary ({needed}) for data.name="
                       f"{config.data.name!r}, got {config.model.vocab_size}")
    dataset.check_seq_len(config.data, config.seq_len)


def configured_objective(config: TrainConfig) -> Callable[..., Any]:
    """`objective(model, batch, rng) -> (loss, metrics)`: the run's objective with its options bound
    (`options=` keyword) when it declares any."""
    objective = OBJECTIVES.get(config.objective)
    options = objective_options(config.objective, config.objective_options)
    return objective if options is None else functools.partial(objective, options=options)
