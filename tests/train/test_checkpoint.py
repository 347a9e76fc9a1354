"""Checkpointer: round trips (dtypes, optax state, RNG keys, sharded restore), exact retention, async saves,
the non-finite refusal, checksums, data-state checks and falling back past corrupt checkpoints quietly."""

import functools
import gc
import glob
import os
import shutil
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from icml26zoo.train.batch_source import GRAIN_KEY, check_data_state
from icml26zoo.train.checkpoint import Checkpointer, CheckpointRestoreError, NonFiniteStateError

# When Orbax's restore fails on a missing file, TensorStore completes the other pending reads on a thread
# after Orbax's asyncio loop has closed, and Python reports "RuntimeError: Event loop is closed" as an
# unraisable exception. The checkpointer drops it (test_fallback_prints_at_most_a_few_lines checks that),
# but pytest swaps its own hook in per test phase, so a late one can still reach pytest's.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def make_state(seed: int = 0) -> dict:
    """A trainer-like state: mixed-dtype params, AdamW state, a step counter and raw key data."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {
        "dense": {"w": jax.random.normal(k1, (8, 4), jnp.float32), "b": jnp.zeros((4,), jnp.bfloat16)},
        "embed": jax.random.normal(k2, (16, 8)).astype(jnp.bfloat16),
        "count": jnp.arange(3, dtype=jnp.int32),
    }
    float_params = {"dense": params["dense"], "embed": params["embed"]}
    return {
        "params": params,
        "opt_state": optax.adamw(1e-3).init(float_params),
        "step": jnp.asarray(seed, jnp.int32),
        "rng": jax.random.key_data(jax.random.key(seed + 100)),
    }


def abstract(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def assert_trees_equal(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.fixture
def ckpt_dir(tmp_path):
    return tmp_path / "ckpt"


@pytest.fixture
def open_checkpointer(ckpt_dir):
    """Factory for Checkpointers on `ckpt_dir` that are all closed after the test."""
    made = []

    def make(**kwargs):
        made.append(Checkpointer(ckpt_dir, **kwargs))
        return made[-1]

    yield make
    for c in made:
        c.close()


def step_dirs(path) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_round_trip_mixed_dtypes_optax_state_and_data_state(open_checkpointer):
    ckpt = open_checkpointer(async_save=False)
    state = make_state(seed=7)
    data_state = {"epoch": 2, "position": [3, 4], "name": "stdlib"}
    assert ckpt.save(7, state, data_state)

    step, restored, restored_data = ckpt.restore_latest(abstract(make_state(seed=0)))
    assert step == 7
    assert restored_data == data_state
    assert_trees_equal(restored, state)
    assert isinstance(restored["opt_state"][0], optax.ScaleByAdamState)


def test_data_state_none_and_typed_key_round_trip(open_checkpointer):
    ckpt = open_checkpointer(async_save=False)
    state = {"w": jnp.ones((2,), jnp.float32), "key": jax.random.key(5)}
    ckpt.save(1, state)
    step, restored, data_state = ckpt.restore_latest(abstract(state))
    assert (step, data_state) == (1, None)
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(state["key"]))


def test_restore_into_sharded_abstract_tree(open_checkpointer):
    assert jax.device_count() == 8, "tests/conftest.py should provide 8 CPU devices"
    mesh = Mesh(np.array(jax.devices()), ("fsdp",))
    fsdp = NamedSharding(mesh, P("fsdp"))
    replicated = NamedSharding(mesh, P())
    ckpt = open_checkpointer(async_save=False)
    state = make_state(seed=3)
    ckpt.save(3, state)

    target = abstract(state)
    target["params"]["dense"]["w"] = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=fsdp)
    target["params"]["embed"] = jax.ShapeDtypeStruct((16, 8), jnp.bfloat16, sharding=replicated)
    _, restored, _ = ckpt.restore_latest(target)

    w = restored["params"]["dense"]["w"]
    assert w.sharding == fsdp
    assert {s.data.shape for s in w.addressable_shards} == {(1, 4)}
    np.testing.assert_array_equal(np.asarray(w), np.asarray(state["params"]["dense"]["w"]))
    assert restored["params"]["embed"].sharding == replicated
    assert_trees_equal(restored, state)


def test_retention_keeps_newest(open_checkpointer, ckpt_dir):
    ckpt = open_checkpointer(keep=2, async_save=False)
    for step in (1, 2, 3):
        ckpt.save(step, make_state(step))
    assert ckpt.all_steps() == [2, 3]
    assert ckpt.latest_step() == 3
    assert step_dirs(ckpt_dir) == ["2", "3"]


def test_async_save_survives_donation_then_wait(open_checkpointer):
    ckpt = open_checkpointer(async_save=True)
    state = make_state(seed=1)
    expected = jax.device_get(state)
    ckpt.save(1, state)
    # What the trainer does next: a donated step that reuses the buffers while the save may be writing.
    state = jax.jit(lambda s: jax.tree.map(lambda x: x * 0, s), donate_argnums=0)(state)
    ckpt.wait()
    assert ckpt.all_steps() == [1]
    _, restored, _ = ckpt.restore_latest(abstract(state))
    assert_trees_equal(restored, expected)


@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf])
def test_non_finite_state_is_refused(open_checkpointer, ckpt_dir, bad):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, make_state())
    state = make_state()
    state["params"]["dense"]["b"] = state["params"]["dense"]["b"].at[2].set(bad)
    with pytest.raises(NonFiniteStateError, match=r"step 2.*\['params'\]\['dense'\]\['b'\]"):
        ckpt.save(2, state)
    ckpt.wait()
    assert step_dirs(ckpt_dir) == ["1"]
    assert ckpt.all_steps() == [1]


def test_bad_arguments_raise_value_error(open_checkpointer, tmp_path):
    with pytest.raises(ValueError, match="keep"):
        Checkpointer(tmp_path / "x", keep=0)
    ckpt = open_checkpointer(async_save=False)
    state = make_state()
    with pytest.raises(ValueError, match="step"):
        ckpt.save(-1, state)
    with pytest.raises(ValueError, match="data_state"):
        ckpt.save(1, state, {"bad": object()})
    with pytest.raises(ValueError, match=r"state leaf \['name'\]"):
        ckpt.save(1, {"w": jnp.ones(2), "name": "adam"})
    with pytest.raises(ValueError, match="abstract_state"):
        ckpt.restore_latest({"w": "not an array"})
    assert ckpt.all_steps() == []


def test_empty_directory_restores_none(open_checkpointer):
    ckpt = open_checkpointer()
    assert ckpt.restore_latest(abstract(make_state())) is None
    assert ckpt.latest_step() is None


def _delete_array_data(step_dir):
    files = glob.glob(f"{step_dir}/state/**/d/*", recursive=True)
    assert files, "expected OCDBT data files to corrupt"
    for f in files:
        os.remove(f)


def _truncate_metadata(step_dir):
    open(f"{step_dir}/state/_METADATA", "w").close()


def _half_written(step_dir):
    shutil.rmtree(step_dir)
    os.makedirs(step_dir)


@pytest.mark.parametrize("corrupt", [_delete_array_data, _truncate_metadata, _half_written])
def test_corrupt_latest_falls_back_to_previous(open_checkpointer, ckpt_dir, corrupt):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, make_state(1), {"pos": 1})
    ckpt.save(2, make_state(2), {"pos": 2})
    corrupt(ckpt_dir / "2")

    with pytest.warns(RuntimeWarning, match="step 2"):
        step, restored, data_state = ckpt.restore_latest(abstract(make_state()))
    assert (step, data_state) == (1, {"pos": 1})
    assert_trees_equal(restored, make_state(1))

    # Resuming from step 1 and saving step 2 again replaces the corrupt one instead of being skipped.
    assert ckpt.save(2, make_state(5), {"pos": 5})
    step, restored, data_state = ckpt.restore_latest(abstract(make_state()))
    assert (step, data_state) == (2, {"pos": 5})
    assert_trees_equal(restored, make_state(5))


def test_all_corrupt_raises_restore_error(open_checkpointer, ckpt_dir):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, make_state(1))
    ckpt.save(2, make_state(2))
    _delete_array_data(ckpt_dir / "1")
    _truncate_metadata(ckpt_dir / "2")
    with pytest.warns(RuntimeWarning), pytest.raises(CheckpointRestoreError, match=r"step 2: .*step 1: "):
        ckpt.restore_latest(abstract(make_state()))


def test_interrupted_save_temp_dir_is_ignored(open_checkpointer, ckpt_dir):
    first = open_checkpointer(async_save=False)
    first.save(1, make_state(1))
    first.close()
    # What a crash during an atomic save leaves behind.
    os.makedirs(ckpt_dir / "2.orbax-checkpoint-tmp-1234567" / "state")
    ckpt = open_checkpointer()
    assert ckpt.all_steps() == [1]
    step, restored, _ = ckpt.restore_latest(abstract(make_state()))
    assert step == 1
    assert_trees_equal(restored, make_state(1))


@pytest.mark.parametrize("keep", [1, 2])
def test_async_saves_leave_exactly_keep_steps(open_checkpointer, ckpt_dir, keep):
    ckpt = open_checkpointer(keep=keep, async_save=True)
    for step in range(1, 6):
        ckpt.save(step, make_state(step), {GRAIN_KEY: step})
    ckpt.wait()
    expected = [str(s) for s in range(6 - keep, 6)]
    assert step_dirs(ckpt_dir) == expected
    assert ckpt.all_steps() == [int(s) for s in expected]


def flip_a_byte_of(array, step_dir) -> None:
    """Flips one byte inside `array`'s stored bytes, found verbatim (zstd stores incompressible bytes raw)."""
    needle = np.asarray(array).tobytes()
    for name in glob.glob(f"{step_dir}/state/**/d/*", recursive=True):
        data = bytearray(open(name, "rb").read())
        at = data.find(needle)
        if at >= 0:
            data[at + len(needle) // 2] ^= 0x01
            with open(name, "wb") as f:
                f.write(bytes(data))
            return
    raise AssertionError(f"the array's bytes were not found under {step_dir}")


def big_state(step: int) -> dict:
    """A 16 KiB leaf of random bytes: stored in an OCDBT data file, where nothing else checks it.

    Small values are inlined in OCDBT's index nodes, which carry their own checksum; random bytes do not
    compress, so zstd stores them verbatim and a flipped byte still decodes, to a different array.
    """
    w = jax.random.bits(jax.random.key(step), (16384,), jnp.uint8)
    return {"params": {"w": w, "b": jnp.full((3,), step, jnp.int32)}}


def test_flipped_byte_is_caught_by_its_checksum(open_checkpointer, ckpt_dir):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, big_state(1), {GRAIN_KEY: 1})
    ckpt.save(2, big_state(2), {GRAIN_KEY: 2})
    flip_a_byte_of(big_state(2)["params"]["w"], ckpt_dir / "2")
    with pytest.warns(RuntimeWarning) as caught:
        step, restored, _ = ckpt.restore_latest(abstract(big_state(0)))
    assert step == 1
    assert_trees_equal(restored, big_state(1))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "\n" not in messages[0]
    assert "step 2" in messages[0] and "ChecksumMismatchError: leaf params.w does not match" in messages[0]


def test_flipped_byte_in_the_only_checkpoint_is_an_error(open_checkpointer, ckpt_dir):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, big_state(1))
    flip_a_byte_of(big_state(1)["params"]["w"], ckpt_dir / "1")
    with pytest.warns(RuntimeWarning), pytest.raises(CheckpointRestoreError, match="step 1: .*saved checksum"):
        ckpt.restore_latest(abstract(big_state(0)))


def test_missing_checksum_item_is_corruption(open_checkpointer, ckpt_dir):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, make_state(1))
    ckpt.save(2, make_state(2))
    shutil.rmtree(ckpt_dir / "2" / "checksums")
    with pytest.warns(RuntimeWarning, match="step 2 .*'checksums' item is missing"):
        step, _, _ = ckpt.restore_latest(abstract(make_state()))
    assert step == 1


@pytest.mark.parametrize("bad", [{GRAIN_KEY: "abc"}, {GRAIN_KEY: -5}, {GRAIN_KEY: 2.0}, {GRAIN_KEY: True},
                                 {GRAIN_KEY: 7}, {}, {GRAIN_KEY: 2, "extra": 1}, None])
def test_bad_data_state_falls_back(open_checkpointer, bad):
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, make_state(1), {GRAIN_KEY: 1})
    ckpt.save(2, make_state(2), bad)
    check = functools.partial(check_data_state, GRAIN_KEY)
    with pytest.warns(RuntimeWarning, match="step 2 .*data state"):
        step, _, data_state = ckpt.restore_latest(abstract(make_state()), check_data_state=check)
    assert (step, data_state) == (1, {GRAIN_KEY: 1})


def _garble_manifests(step_dir):
    for manifest in glob.glob(f"{step_dir}/state/**/manifest.ocdbt", recursive=True):
        with open(manifest, "wb") as f:
            f.write(b"not a manifest")


@pytest.mark.parametrize("corrupt", [_garble_manifests, _delete_array_data])
def test_fallback_prints_at_most_a_few_lines(open_checkpointer, ckpt_dir, capfd, monkeypatch, corrupt):
    unraisable = []
    # Stands in for Python's default hook (which prints a traceback), so that anything let through counts.
    monkeypatch.setattr(sys, "unraisablehook", lambda args: unraisable.append(repr(args.exc_value)))
    ckpt = open_checkpointer(async_save=False)
    ckpt.save(1, make_state(1))
    ckpt.save(2, make_state(2))
    corrupt(ckpt_dir / "2")
    capfd.readouterr()
    with pytest.warns(RuntimeWarning, match="step 2"):
        step, _, _ = ckpt.restore_latest(abstract(make_state()))
    ckpt.close()
    # Give TensorStore's threads time to deliver the stray callbacks that used to print tracebacks.
    time.sleep(0.5)
    gc.collect()
    out, err = capfd.readouterr()
    assert step == 1
    assert unraisable == []
    assert len((out + err).splitlines()) <= 3, out + err


def test_saved_structure_describes_the_newest_step(open_checkpointer):
    ckpt = open_checkpointer(async_save=False)
    with pytest.raises(CheckpointRestoreError, match="no checkpoint"):
        ckpt.saved_structure()
    state = make_state(4)
    ckpt.save(4, state)
    structure = ckpt.saved_structure()
    assert structure["params"]["embed"].shape == (16, 8) and structure["params"]["embed"].dtype == jnp.bfloat16
    _, restored, _ = ckpt.restore_latest(structure)
    np.testing.assert_array_equal(np.asarray(restored["params"]["dense"]["w"]),
                                  np.asarray(state["params"]["dense"]["w"]))
