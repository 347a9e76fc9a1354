"""`load_run` reopens a CLI run: config.json read back exactly, parameters bit-identical to the run's final
state, a model whose logits match, a named step, and one-line errors for workdirs without a run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.train import load_run, loop
from icml26zoo.train.__main__ import main
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.errors import CheckpointError

# XLA's cheap pipeline: the restored model is compared with the run's own state and logits, both computed here.
pytestmark = pytest.mark.usefixtures("fast_compile")


def tiny_overrides(data_dir) -> list[str]:
    """A 1-layer llama_tiny on a small MQAR for 4 steps with checkpoints at steps 2 and 4."""
    return [
        "model.num_layers=1", "data.name=mqar", f"data.data_dir={data_dir}", "data.mqar_num_keys=16",
        "data.mqar_num_values=16", "data.mqar_num_pairs=4", "data.mqar_train_examples=256",
        "data.mqar_eval_examples=16", "model.vocab_size=64", "seq_len=32", "batch_size=8", "num_steps=4",
        "log_every=2", "eval_batches=1", "checkpoint_every=2", "tensorboard=false", "progress_bar=false",
        "sample_length=0",
    ]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """(workdir, the final TrainState that train() returned) of one in-process CLI run."""
    root = tmp_path_factory.mktemp("load_run")
    summaries = []
    train = loop.train

    def recording_train(*args, **kwargs):
        summaries.append(train(*args, **kwargs))
        return summaries[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "train", recording_train)
        assert main(["--config", "llama_tiny", "--workdir", str(root / "run"), *tiny_overrides(root / "data")]) == 0
    return root / "run", summaries[0]["state"]


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(jax.device_get(tree))]


def test_load_run_restores_the_final_state_bit_for_bit(finished_run):
    workdir, final = finished_run
    config, model, state = load_run(workdir)
    assert config == apply_overrides(load_preset("llama_tiny"), tiny_overrides(workdir.parent / "data"))
    assert int(state.step) == 4
    for name in ("params", "opt_state", "rng"):
        restored, expected = leaves(getattr(state, name)), leaves(getattr(final, name))
        assert len(restored) == len(expected) > 0
        for got, want in zip(restored, expected, strict=True):
            np.testing.assert_array_equal(got, want)
    tokens = jax.random.randint(jax.random.key(1), (2, 32), 0, config.model.vocab_size, jnp.int32)
    reference = nnx.merge(nnx.graphdef(model), jax.device_get(final.params))
    np.testing.assert_array_equal(np.asarray(model(tokens)), np.asarray(reference(tokens)))


def test_load_run_at_a_named_step_onto_one_device(finished_run):
    workdir, final = finished_run
    _, model, state = load_run(workdir, step=2, devices=jax.devices()[:1])
    assert int(state.step) == 2
    assert model(jnp.zeros((1, 8), jnp.int32)).shape == (1, 8, 64)
    changed = [not np.array_equal(a, b) for a, b in zip(leaves(state.params), leaves(final.params), strict=True)]
    assert any(changed)
    with pytest.raises(CheckpointError, match=r"no checkpoint at step 3; it has steps \[2, 4\]"):
        load_run(workdir, step=3)


def test_load_run_names_what_the_workdir_lacks(finished_run, tmp_path):
    with pytest.raises(CheckpointError, match="has no config.json"):
        load_run(tmp_path)
    (tmp_path / "config.json").write_text((finished_run[0] / "config.json").read_text())
    with pytest.raises(CheckpointError, match="has no checkpoints/ folder"):
        load_run(tmp_path)
