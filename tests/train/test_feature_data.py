"""The "features" data layout and the issue-20 datasets: statistics, batch format, padding, sharding, resumption.

The surfaces are checked against their implicit equations written out here (not the samplers' code), the
Darcy targets against a cell-by-cell finite-difference reference, the digit patches against pixel indexing.
"""

import numpy as np
import pytest

from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import darcy_amr, digit_patches, pipeline, point_sets, sphere_signals

SHAPES_OPTIONS = (("num_points", 24), ("train_examples", 40), ("eval_examples", 10), ("num_shapes", 5))
# Lipschitz constants of the residuals below that are not distances: the ellipsoid's level set |‖p/a‖ − 1|
# (1 / smallest semi-axis), the plane's |z| + overhang.
LIPSCHITZ = {"ellipsoid": 2.5, "plane": 2.0}


def _norm(points, axis=-1):
    return np.linalg.norm(points, axis=axis)


def _segment_distance(rho, z, start, end):
    """Distance in the (ρ, z) half-plane from points to the segment start -> end (a surface of revolution)."""
    point, a, b = np.stack([rho, z], -1), np.asarray(start), np.asarray(end)
    t = np.clip((point - a) @ (b - a) / np.dot(b - a, b - a), 0.0, 1.0)
    return _norm(point - (a + t[:, None] * (b - a)))


def surface_distance(shape, p):
    """|distance| from points [P, 3] to the canonical surface `shape` (implicit descriptions)."""
    x, y, z = p.T
    rho = np.hypot(x, y)
    if shape == "sphere":
        return np.abs(_norm(p) - 0.9)
    if shape == "cube":
        return np.abs(np.max(np.abs(p), axis=1) - 0.5)
    if shape == "cylinder":
        side = _segment_distance(rho, z, (0.5, -0.6), (0.5, 0.6))
        caps = np.minimum(_segment_distance(rho, z, (0, 0.6), (0.5, 0.6)),
                          _segment_distance(rho, z, (0, -0.6), (0.5, -0.6)))
        return np.minimum(side, caps)
    if shape == "torus":
        return np.abs(np.hypot(rho - 0.6, z) - 0.25)
    if shape == "cone":
        return np.minimum(_segment_distance(rho, z, (0, 0.5), (0.6, -0.5)),
                          _segment_distance(rho, z, (0, -0.5), (0.6, -0.5)))
    if shape == "plane":
        return np.abs(z) + np.maximum(np.max(np.abs(p[:, :2]), axis=1) - 0.7, 0)
    if shape == "ellipsoid":
        return np.abs(_norm(p / np.array([0.9, 0.6, 0.4])) - 1.0)
    if shape == "capsule":
        return np.abs(_segment_distance(rho, z, (0, -0.45), (0, 0.45)) - 0.35)
    raise AssertionError(shape)


def test_shapes_lie_on_their_surfaces_and_labels_balance():
    rng = np.random.default_rng(0)
    for shape in point_sets.SHAPES:
        points = point_sets.sample_shape(shape, 200, rng)
        assert points.shape == (200, 3) and np.max(_norm(points)) <= 1.0, shape
        assert np.max(surface_distance(shape, points)) < 1e-9, shape
        other = point_sets.SHAPES[(point_sets.SHAPES.index(shape) + 1) % len(point_sets.SHAPES)]
        assert np.median(surface_distance(other, points)) > 0.02, (shape, other)
    options = point_sets.ShapesOptions(num_points=32, jitter=0.01)
    points, labels = point_sets.generate(options, 80, np.random.SeedSequence(1), rotate=False)
    assert np.array_equal(np.bincount(labels), np.full(8, 10))
    distances = np.concatenate([surface_distance(point_sets.SHAPES[c], cloud) / LIPSCHITZ.get(point_sets.SHAPES[c], 1)
                                for cloud, c in zip(points, labels, strict=True)])
    # Jitter of 0.01 per coordinate moves a point by |N(0, 0.01² I₃)| < 0.06 (6 sigma of the norm).
    assert 0.003 < np.mean(distances) < 0.02 and np.max(distances) < 0.06
    rotations = point_sets.random_rotations(rng, 16)
    np.testing.assert_allclose(rotations @ rotations.transpose(0, 2, 1), np.broadcast_to(np.eye(3), (16, 3, 3)),
                               atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(rotations), 1.0, atol=1e-12)


def test_sphere_signals_are_unit_directions_and_their_bump_fields():
    directions = sphere_signals.fibonacci_sphere(100)
    np.testing.assert_allclose(_norm(directions), 1.0, atol=1e-12)
    centre = np.array([[0.0, 0.0, 1.0]])
    peak = sphere_signals.bump_field(centre, centre, np.array([7.0]), np.array([2.5]))
    opposite = sphere_signals.bump_field(-centre, centre, np.array([7.0]), np.array([2.5]))
    np.testing.assert_allclose([peak[0], opposite[0]], [2.5, 2.5 * np.exp(-14.0)], rtol=1e-12)
    # With smoothing 1 the target is the input field itself; otherwise a different (smoother) field.
    rng = np.random.default_rng(0)
    same = sphere_signals.make_example(sphere_signals.SphereOptions(num_points=50, smoothing=1.0), rng, rotate=True)
    np.testing.assert_allclose(same[2][:, 0], same[1][:, 0], rtol=1e-12)
    np.testing.assert_allclose(_norm(same[0]), 1.0, atol=1e-12)
    smooth = sphere_signals.make_example(sphere_signals.SphereOptions(num_points=50), rng, rotate=False)
    assert smooth[1].shape == (50, 3) and np.max(np.abs(smooth[2][:, 0] - smooth[1][:, 0])) > 1e-2


def _reference_step(p, k, q, dt, h):
    """The explicit scheme written cell by cell: interior p += dt (Σ_faces k_face (p_nb − p) / h² + q)."""
    out = np.zeros_like(p)
    size = p.shape[0]
    for i in range(1, size - 1):
        for j in range(1, size - 1):
            flow = sum(0.5 * (k[i, j] + k[a, b]) * (p[a, b] - p[i, j])
                       for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)))
            out[i, j] = p[i, j] + dt * (flow / h**2 + q[i, j])
    return out


def test_darcy_targets_follow_the_finite_difference_step_and_weights_are_quadrature():
    rng = np.random.default_rng(0)
    p, k, q = rng.normal(size=(3, 7, 7))
    np.testing.assert_allclose(darcy_amr.darcy_step(p, np.abs(k), q, 1e-3, 0.2),
                               _reference_step(p, np.abs(k), q, 1e-3, 0.2), rtol=1e-12, atol=1e-12)
    options = darcy_amr.DarcyOptions(grid=20, warmup=2, substeps=3, coarse=30, near_well=10, high_gradient=10)
    fields, nodes = darcy_amr.make_example(options, rng)
    h = 1.0 / 19
    dt = darcy_amr.CFL * h * h / fields["k"].max()
    expected = fields["p_a"]
    for _ in range(3):
        expected = _reference_step(expected, fields["k"], fields["q"], dt, h)
    np.testing.assert_allclose(fields["p_b"], expected, rtol=1e-10, atol=1e-12)
    conductivities = np.unique(fields["k"])
    assert len(conductivities) == 2 and conductivities[1] == 1.0 and 0.01 <= conductivities[0] <= 0.1
    stored = darcy_amr.node_arrays(options, fields, nodes)
    count = len(nodes)
    assert len(np.unique(nodes, axis=0)) == count and count <= options.max_nodes
    assert np.all(nodes >= 1) and np.all(nodes <= 18)
    np.testing.assert_allclose(stored["targets"][:count, 0], (fields["p_b"] - fields["p_a"])[nodes[:, 0], nodes[:, 1]],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stored["features"][:count, 0], fields["p_a"][nodes[:, 0], nodes[:, 1]], rtol=1e-5)
    np.testing.assert_allclose(stored["points"][:count], nodes / 19, rtol=1e-6)
    weights = stored["weights"]
    np.testing.assert_allclose(weights.sum(), count, rtol=1e-5)
    assert np.all(weights[:count] > 0) and not np.any(weights[count:])
    assert not np.any(stored["points"][count:]) and not np.any(stored["targets"][count:])
    # Refined regions have more nodes, so their cells are smaller: the well's nodes weigh less than the rest.
    near = _norm(stored["points"][:count] - fields["well"]) < darcy_amr.WELL_RADIUS
    assert weights[:count][near].mean() < weights[:count][~near].mean()


def test_digit_patches_index_the_pixels():
    pixels = np.random.default_rng(0).integers(0, 17, size=(3, 64))
    patches = digit_patches.to_patches(pixels)
    centres = digit_patches.patch_centres()
    for patch in range(16):
        row, col = divmod(patch, 4)
        np.testing.assert_allclose(centres[patch], [(col + 0.5) / 4, (row + 0.5) / 4])
        for index in range(4):
            pixel = (2 * row + index // 2) * 8 + 2 * col + index % 2
            np.testing.assert_allclose(patches[:, patch, index], pixels[:, pixel] / 16)
    with pytest.raises(ValueError, match="pixels must have shape"):
        digit_patches.to_patches(np.zeros((2, 63)))


@pytest.fixture(scope="module")
def shapes_data(tmp_path_factory):
    return DataConfig(name="zoo_shapes", data_dir=str(tmp_path_factory.mktemp("data")), task_options=SHAPES_OPTIONS)


def test_feature_batches_pad_shard_and_resume(shapes_data):
    kwargs = {"batch_size": 8, "seq_len": 30, "seed": 3}
    iterator = pipeline.make_train_iterator(shapes_data, process_index=0, process_count=1, **kwargs)
    batch = next(iterator)
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
        "points": ((8, 30, 3), np.float32), "features": ((8, 30, 0), np.float32),
        "weights": ((8, 30), np.float32), "labels": ((8,), np.int32)}
    np.testing.assert_array_equal(batch["weights"][:, :24], 1.0)
    assert not np.any(batch["weights"][:, 24:]) and not np.any(batch["points"][:, 24:])
    state = iterator.get_state()
    following = [next(iterator) for _ in range(5)]  # Crosses the epoch boundary (40 examples = 5 batches).
    resumed = pipeline.make_train_iterator(shapes_data, process_index=0, process_count=1, **kwargs)
    resumed.set_state(state)
    for want in following:
        got = next(resumed)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    halves = [next(pipeline.make_train_iterator(shapes_data, process_index=p, process_count=2, **kwargs))
              for p in (0, 1)]
    np.testing.assert_array_equal(np.concatenate([h["points"] for h in halves]), batch["points"])
    first_epoch = np.concatenate([batch["labels"]] + [b["labels"] for b in following[:4]])
    assert np.array_equal(np.bincount(first_epoch), np.full(5, 8))


def test_feature_eval_pass_pads_rows_and_is_rotated(shapes_data):
    assert pipeline.num_eval_batches(shapes_data, batch_size=4, seq_len=24) == 3
    batches = list(pipeline.make_eval_iterator(shapes_data, batch_size=4, seq_len=24))
    assert len(batches) == 3
    weights = np.concatenate([b["weights"] for b in batches])
    assert np.count_nonzero(weights.sum(axis=1)) == 10 and not np.any(weights[10:])
    points = np.concatenate([b["points"] for b in batches])[:10]
    labels = np.concatenate([b["labels"] for b in batches])[:10]
    # The eval split is rotated by default: the clouds leave their canonical surfaces, norms are kept.
    canonical = [np.median(surface_distance(point_sets.SHAPES[c], cloud))
                 for cloud, c in zip(points, labels, strict=True)]
    assert np.median(canonical) > 0.05
    sphere = points[labels == 0]
    np.testing.assert_allclose(np.median(_norm(sphere)), 0.9, atol=0.02)


def test_feature_dataset_bad_options_and_rows(shapes_data):
    with pytest.raises(ValueError, match="data.task_options.*num_points"):
        DataConfig(name="zoo_shapes", task_options=(("num_points", 0),))
    with pytest.raises(ValueError, match="data.task_options.*jitter"):
        DataConfig(name="zoo_shapes", task_options=(("jitter", 0.5),))
    with pytest.raises(ValueError, match="data.task_options.*smoothing"):
        DataConfig(name="zoo_sphere", task_options=(("smoothing", 0.5),))
    with pytest.raises(ValueError, match="data.task_options.*coarse"):
        DataConfig(name="zoo_darcy_amr", task_options=(("grid", 8), ("coarse", 100)))
    with pytest.raises(ValueError, match="seq_len must be >= 24"):
        pipeline.make_train_iterator(shapes_data, batch_size=4, seq_len=20, seed=0, process_index=0, process_count=1)
    with pytest.raises(ValueError, match="seq_len must be >= 24"):
        pipeline.num_eval_batches(shapes_data, batch_size=4, seq_len=23)
