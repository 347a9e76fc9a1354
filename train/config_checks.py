"""What a run needs from a checked config beyond its fields, checked by the CLI before it trains: the model
against the dataset (`check_fits_data`: vocabulary, row length, labels for a labelled objective, the sample's
top-k) and the data directory (`check_data_dir`), each a `RunError` naming the field; the model against its
options and this machine is `train.fits.check_fits_model`. Also the objective the trainer calls with its options
bound (`configured_objective`). The config's own checks (names, options, finite numbers: `check_config`) live in
`train.config`.
"""

from __future__ import annotations

import functools
import os
import pathlib
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
    if getattr(OBJECTIVES.get(config.objective), "needs_labels", False) and dataset.labelled is False:
        raise RunError(f"objective={config.objective!r} needs a labelled dataset (one label per row, e.g. data.name="
                       f"'topics'); data.name={config.data.name!r} has no labels")
    # The sample is drawn only from byte-level (text) data; top-k over more tokens than the model has fails.
    if config.sample_length and dataset.byte_level and config.sample_top_k > config.model.vocab_size:
        raise RunError(f"sample_top_k must be at most model.vocab_size ({config.model.vocab_size}) or 0 (no top-k), "
                       f"got {config.sample_top_k}")


def check_data_dir(config: TrainConfig) -> None:
    """The data directory (data.data_dir, else $ZOO_DATA_DIR, else the default cache) is a readable directory,
    or does not exist yet and can be created (its nearest existing parent is a writable directory)."""
    # Imported here: the data layer imports TFDS, which checking a config alone does not need.
    from icml26zoo.train.data.sources import data_dir

    path = pathlib.Path(data_dir(config.data))
    if path.exists():
        if not path.is_dir():
            raise RunError(f"data.data_dir {str(path)!r} is not a directory")
        if not os.access(path, os.R_OK | os.X_OK):
            raise RunError(f"data.data_dir {str(path)!r} is not readable")
        return
    parent = next(p for p in path.parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise RunError(f"data.data_dir {str(path)!r} does not exist and cannot be created ({str(parent)!r} is not "
                       "a writable directory)")


def configured_objective(config: TrainConfig) -> Callable[..., Any]:
    """`objective(model, batch, rng) -> (loss, metrics)`: the run's objective with its options bound
    (`options=` keyword) when it declares any."""
    objective = OBJECTIVES.get(config.objective)
    options = objective_options(config.objective, config.objective_options)
    return objective if options is None else functools.partial(objective, options=options)
