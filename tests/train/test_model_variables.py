"""Trainer arguments: objectives get the keywords they declare in `trainer_arguments`, and only known ones.

Model variables (`TrainState.variables`) are tested end to end by the api experiment's contract
(tests/repro/smoke_checks.py, `api_rows`): its cell trains model api through the shared trainer, whose step
rebuilds the SCOPE bank in the model's variables; the cell's final checkpoint must hold the rebuilt bank, and
the experiment scores the model that `load_run` restores from it. The restore a resume goes through
(`checkpointed` / `from_checkpoint`) is the one `load_run` uses; resume equality is test_training's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from icml26zoo.train.step import TrainState, call_objective, checkpointed, from_checkpoint


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


def test_a_state_without_variables_keeps_the_four_field_checkpoint_layout():
    plain = TrainState(jnp.int32(3), {"w": jnp.ones(2)}, (), jnp.zeros(2, jnp.uint32))
    assert len(checkpointed(plain)) == 4 and from_checkpoint(checkpointed(plain)) == plain
    carried = plain._replace(variables={"bank": jnp.zeros(3)})
    assert checkpointed(carried) is carried and from_checkpoint(carried) is carried
