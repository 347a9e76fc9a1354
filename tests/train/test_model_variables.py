"""Model variables in the shared trainer: a model's non-Param state (API's SCOPE prototype bank and epoch cache)
travels in `TrainState.variables`, is updated by the objective inside the jitted step, checkpointed and restored
exactly, read by evaluation and `load_run`; objectives get the trainer arguments they declare. (A resume restores
through the same `checkpointed` / `from_checkpoint` pair as `load_run`; that a resumed run equals an uninterrupted
one is tested in test_training.)"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.configs import load_preset
from icml26zoo.train import load_run
from icml26zoo.train.loop import train
from icml26zoo.train.step import call_objective

pytestmark = pytest.mark.usefixtures("fast_compile")  # compared with themselves only

TINY_MODEL = (("seq_len", 6), ("kernel_size", 3), ("cross_layers", 1), ("memory_layers", 1), ("fill", "prototype"),
              ("cache_size", 16))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """Preset api shrunk: T = 6, d = 4, one epoch = 16 samples = 2 steps of 8; 2 steps, checkpointed at the end."""
    base = load_preset("api")
    model = dataclasses.replace(base.model, d_model=4, num_heads=1, num_kv_heads=1, model_options=TINY_MODEL)
    data = dataclasses.replace(base.data, data_dir=str(tmp_path_factory.mktemp("msa")), task_options=(
        ("sequence_length", 6), ("train_examples", 16), ("eval_examples", 8)))
    return dataclasses.replace(base, model=model, data=data, seq_len=18, batch_size=8, num_steps=2, log_every=2,
                               checkpoint_every=2, progress_bar=False)


def _leaves(state) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves((state.params, state.variables))]


def test_variables_update_in_the_step_and_round_trip_through_checkpoints(config, tmp_path):
    summary = train(config, tmp_path, devices=jax.devices()[:1])
    state = summary["state"]
    variables = state.variables["api"]
    assert np.asarray(variables["ready"]).all()  # the first epoch (step 2) rebuilt every prototype
    assert np.any(np.asarray(variables["prototypes"])) and int(variables["cache_count"]) == 0
    assert 0 < summary["eval/class_acc"] <= 1 and summary["eval/imp_err"] > 0  # evaluation read the bank
    _, model, saved = load_run(tmp_path, devices=jax.devices()[:1])  # the restore a resume also goes through
    for a, b in zip(_leaves(state), _leaves(saved), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(model.api.prototypes[...]), np.asarray(variables["prototypes"]))


def test_trainer_arguments_are_checked_and_passed():
    seen = {}

    def objective(model, batch, rng, *, train, step):
        seen.update(train=train, step=step)
        return jnp.float32(0.0), {}

    objective.trainer_arguments = ("train", "step")
    call_objective(objective, None, {}, jax.random.key(0), train=False, step=None)
    assert seen == {"train": False, "step": None}
    objective.trainer_arguments = ("epoch",)
    with pytest.raises(ValueError, match=r"trainer_arguments must be among \['train', 'step'\], got \['epoch'\]"):
        call_objective(objective, None, {}, jax.random.key(0), train=True, step=None)
