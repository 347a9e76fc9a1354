"""Mesh construction, the FSDP sharding rule and global batch assembly on 8 simulated devices."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from icml26zoo.train.sharding import batch_sharding, fsdp_spec, global_batch, make_mesh, tree_shardings


def test_mesh_uses_every_device():
    mesh = make_mesh(-1, 2)
    assert dict(mesh.shape) == {"data": 4, "fsdp": 2}
    assert make_mesh(8, 1).shape["data"] == 8


@pytest.mark.parametrize("data, fsdp", [(3, 1), (-1, 3), (2, 2)])
def test_mesh_rejects_shapes_that_do_not_cover_the_devices(data, fsdp):
    with pytest.raises(ValueError, match="mesh_"):
        make_mesh(data, fsdp)


@pytest.mark.parametrize(
    "shape, size, expected",
    [
        ((256, 64), 4, P("fsdp", None)),
        ((6, 64), 4, P(None, "fsdp")),
        ((6, 7), 4, P()),
        ((), 4, P()),
        ((64,), 1, P()),
        ((2, 64, 64), 2, P(None, "fsdp", None)),
    ],
)
def test_fsdp_spec_picks_the_largest_divisible_axis(shape, size, expected):
    assert fsdp_spec(shape, size) == expected


def test_tree_shardings_and_global_batch_place_rows_on_every_device():
    mesh = make_mesh(-1, 4)
    tree = {"w": jax.ShapeDtypeStruct((8, 12), np.float32), "b": jax.ShapeDtypeStruct((3,), np.float32)}
    shardings = tree_shardings(mesh, tree)
    assert shardings["w"].spec == P(None, "fsdp")
    assert shardings["b"].spec == P()
    batch = {"inputs": np.arange(16 * 5, dtype=np.int32).reshape(16, 5)}
    placed = global_batch(mesh, batch)
    assert placed["inputs"].sharding == batch_sharding(mesh)
    np.testing.assert_array_equal(np.asarray(placed["inputs"]), batch["inputs"])
    with pytest.raises(ValueError, match="batch\\['inputs'\\] has 4 rows"):
        global_batch(mesh, {"inputs": np.zeros((4, 5), np.int32)})
