"""Registry-driven conformance of what the trainer plugs in: every registered dataset, objective and MoE router,
tested by being registered (nothing here names one except where an entry cannot run on its own).

- A dataset builds offline, gives deterministic batches of the documented layout (token rows: int32 inputs and
  targets inside the vocabulary, float32 weights in [0, 1], int32 segment ids and positions; point sets: float32
  points and weights), an eval pass of the same layout, and rejects an option it does not take by name.
- An objective, on a batch of a dataset it is trained on, gives a finite float32 scalar loss, finite gradients
  and scalar metrics under `jit`, and a ValueError naming the field when its batch lacks what it needs.
- A router, inside the LM's MoE feed-forward, gives finite logits and gradients under `jit`, and an unknown
  router option is a ValueError listing the valid ones.

Each entry runs on the configuration of a preset that uses it (the presets are registered too); an entry no
preset uses must be listed in EXAMPLES below with a preset and overrides, or this test fails naming it.
"""

from __future__ import annotations

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset, names
from icml26zoo.moe.registry import ROUTERS
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.config import TrainConfig, apply_overrides
from icml26zoo.train.config_checks import configured_objective
from icml26zoo.train.data import make_eval_iterator, make_train_iterator
from icml26zoo.train.data.features import is_feature_data
from icml26zoo.train.datasets import DATASETS, dataset_for
from icml26zoo.train.runs import build_train_model
from icml26zoo.train.step import call_objective, merge_model, split_model

pytestmark = pytest.mark.usefixtures("fast_compile")
ROWS = 2
# Objectives see 8 rows: a contrastive loss (nc_scl_*) needs two rows of one class in its batch to have a gradient.
OBJECTIVE_ROWS = 8
# Split sizes for datasets whose options take them (enough for OBJECTIVE_ROWS rows of every class).
SMALL_SPLITS = {"train_examples": 64, "eval_examples": 16}
# Families that read a dataset the user prepared with TFDS (nothing to build offline here); their reading is
# tested on locally built TFDS datasets in tests/train/test_data.py ("tfds:") and test_digits_image_rows.py.
USER_PREPARED = ("tfds:", "tfds_image:")
# Entries no preset trains, with the preset and overrides they are checked on.
EXAMPLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ipw_scoring": ("classify_tiny", ("objective=ipw_scoring", "data.topics_num_classes=2")),
    "gaussian": ("moe_tiny", ("model.moe.router=gaussian",)),
    "laplacian": ("moe_tiny", ("model.moe.router=laplacian",)),
    "mahalanobis": ("moe_tiny", ("model.moe.router=mahalanobis",)),
    "palindromes": ("looped_dyck", ("data.task_options=()", "data.name=palindromes", "seq_len=40")),
    "bfvp": ("looped_dyck", ("data.task_options=()", "data.name=bfvp", "seq_len=40")),
}
# The neural-collapse objectives come as a family nc_<loss>[_etf]_k<K>, K the number of classes: each runs on
# the labelled preset with that many classes.
NC_PRESET = {4: ("classify_tiny", ()), 10: ("nc_digits", ())}


@functools.cache
def _presets() -> dict[str, TrainConfig]:
    return {name: load_preset(name) for name in names()}


def _example(kind: str, name: str, uses) -> tuple[str, tuple[str, ...]]:
    """(preset, overrides) on which entry `name` of `kind` runs: the first preset using it, else EXAMPLES."""
    for preset, config in sorted(_presets().items()):
        if uses(config):
            return preset, ()
    if kind == "objective" and name.startswith("nc_"):
        preset, overrides = NC_PRESET[int(name.rsplit("_k", 1)[1])]
        return preset, (*overrides, f"objective={name}")
    assert name in EXAMPLES, (f"{kind} {name!r} is registered but no preset uses it: add a preset to configs/ "
                              f"(or an entry to EXAMPLES in {__name__}) so that it is tested")
    return EXAMPLES[name]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("registry_data"))


def _small_data(config: TrainConfig) -> TrainConfig:
    """The preset's dataset with SMALL_SPLITS examples where its options take a split size: the layout and the
    objective's contract do not depend on how many examples are built, the build time does (Darcy solves)."""
    dataset = dataset_for(config.data)
    # Task and feature datasets parse data.task_options into a dataclass (`options`); the others take none.
    options = dataset.options(config.data) if hasattr(dataset, "options") else None
    fields = {field.name for field in dataclasses.fields(options)} if options is not None else set()
    sizes = {name: size for name, size in SMALL_SPLITS.items() if name in fields}
    if not sizes:
        return config
    options = tuple((k, v) for k, v in config.data.task_options if k not in sizes) + tuple(sizes.items())
    return dataclasses.replace(config, data=dataclasses.replace(config.data, task_options=options))


def _config(preset: str, overrides: tuple[str, ...], data_dir: str, rows: int = ROWS) -> TrainConfig:
    config = apply_overrides(_presets()[preset], [*overrides, f"data.data_dir={data_dir}"])
    return _small_data(dataclasses.replace(config, batch_size=rows))


def _first_batch(config: TrainConfig) -> dict[str, np.ndarray]:
    iterator = make_train_iterator(config.data, batch_size=config.batch_size, seq_len=config.seq_len, seed=0,
                                   process_index=0, process_count=1)
    return next(iter(iterator))


DATASET_NAMES = [name for name in DATASETS.names() if name not in USER_PREPARED]


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_every_registered_dataset_builds_deterministic_batches_of_its_layout(name, data_dir):
    preset, overrides = _example("dataset", name, lambda config: config.data.name == name)
    config = _config(preset, overrides, data_dir)
    batch, again = _first_batch(config), _first_batch(config)
    assert sorted(batch) == sorted(again)
    for key in batch:
        np.testing.assert_array_equal(batch[key], again[key], err_msg=f"{name}: batch[{key!r}] is not deterministic")
    length = config.seq_len
    if is_feature_data(config.data):
        chex.assert_rank(batch["points"], 3)
        chex.assert_type([batch["points"], batch["weights"]], np.float32)
        chex.assert_shape(batch["weights"], (ROWS, length))
        assert batch["points"].shape[:2] == (ROWS, length) and np.isfinite(batch["points"]).all()
    else:
        chex.assert_shape([batch[k] for k in ("inputs", "targets", "weights", "segment_ids", "positions")],
                          (ROWS, length))
        chex.assert_type([batch[k] for k in ("inputs", "targets", "segment_ids", "positions")], np.int32)
        chex.assert_type(batch["weights"], np.float32)
        vocab = dataset_for(config.data).vocab_size(config.data)
        assert 0 <= batch["inputs"].min() and batch["inputs"].max() < vocab
        assert 0 <= batch["weights"].min() and batch["weights"].max() <= 1 and batch["weights"].sum() > 0
    evaluation = next(iter(make_eval_iterator(config.data, batch_size=ROWS, seq_len=length, process_index=0,
                                              process_count=1, max_batches=1)))
    assert sorted(evaluation) == sorted(batch)
    chex.assert_trees_all_equal_shapes_and_dtypes(dict(evaluation), dict(batch))
    with pytest.raises(ValueError, match=r"data.task_options: .*no_such_option"):
        dataclasses.replace(config.data, task_options=(("no_such_option", 1),))


def _objective_names() -> list[str]:
    return OBJECTIVES.names()


def _loss_and_grads(config: TrainConfig, batch: dict) -> tuple[np.ndarray, dict, dict, nnx.Module]:
    """(loss, metrics, grads) on the host (numpy: the checks on them compile nothing) and the model built."""
    model = build_train_model(config)
    graphdef, params, variables = split_model(model)
    objective = configured_objective(config)

    def loss_fn(params, batch):
        # As the train step calls it: the model's non-Param variables merged in, the trainer arguments given.
        return call_objective(objective, merge_model(graphdef, params, variables), batch, jax.random.key(0),
                              train=True, step=jnp.zeros((), jnp.int32))

    (loss, metrics), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(params, batch)
    loss, metrics, grads = jax.device_get((loss, metrics, grads))
    return loss, metrics, grads, model


@pytest.mark.parametrize("name", _objective_names())
def test_every_registered_objective_gives_a_finite_loss_and_gradients_under_jit(name, data_dir):
    preset, overrides = _example("objective", name, lambda config: config.objective == name)
    config = _config(preset, overrides, data_dir, rows=OBJECTIVE_ROWS)
    batch = {key: jnp.asarray(value) for key, value in _first_batch(config).items()}
    loss, metrics, grads, model = _loss_and_grads(config, batch)
    chex.assert_shape(loss, ())
    chex.assert_type(loss, jnp.float32)
    assert np.isfinite(loss), f"{name}: loss {loss}"
    chex.assert_tree_all_finite(grads)
    assert any(np.max(np.abs(g)) > 0 for g in jax.tree.leaves(grads)), f"{name}: every gradient is 0"
    for key, value in metrics.items():
        assert np.shape(value) == () and np.isfinite(value), (name, key, value)
    # The batch field every objective reads first: without it the error names it (no KeyError traceback).
    needed = "points" if "points" in batch else "inputs"
    with pytest.raises(ValueError, match=needed):
        configured_objective(config)(model, {k: v for k, v in batch.items() if k != needed}, jax.random.key(0))


@pytest.mark.parametrize("name", ROUTERS.names())
def test_every_registered_router_routes_with_finite_gradients_and_checks_its_options(name, data_dir):
    preset, overrides = _example("router", name, lambda c: c.model.moe is not None and c.model.moe.router == name)
    config = _config(preset, overrides, data_dir)
    batch = {key: jnp.asarray(value) for key, value in _first_batch(config).items()}
    loss, metrics, grads, _ = _loss_and_grads(config, batch)
    assert np.isfinite(loss) and all(np.isfinite(v) for v in metrics.values()), (name, loss, metrics)
    chex.assert_tree_all_finite(grads)
    with pytest.raises(ValueError, match=r"no_such_option.*valid"):
        apply_overrides(config, ["model.moe.router_options=(('no_such_option', 1),)"])
