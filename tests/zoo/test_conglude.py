"""ConGLUDe (icml26zoo.bio.conglude, egnn, conglude_metrics, losses.conglude): the spec's invariants 1-6, the EGNN
layer against a NumPy transcription of the official layer, the metrics, the RDKit featurisation and bad input.

The EGNN transcription follows the operation order of ml-jku/conglude, file conglude/modules/utils/gnn_layers.py
(`EGNNLayer.message/aggregate/update/forward`, PyG `LayerNorm` in its default "graph" mode without a batch vector),
commit 71c7113823e1ef1f0f81b1b8235b2e25dc71c1cc; the NumPy below is this test's own code.

One jitted forward of a tiny model serves invariants 1-4: its batch holds one protein (10 real residues padded to
12) and its transformed copies (rotated, reflected, residues and VNs permuted, and the negative control).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.bio import conglude_data, conglude_metrics
from icml26zoo.bio.conglude import ConGLUDe, combined_scores
from icml26zoo.bio.egnn import EGNNLayer, GNNLayer
from icml26zoo.losses.conglude import info_nce, vn_position_loss
from icml26zoo.models.config import ModelConfig

pytestmark = pytest.mark.usefixtures("fast_compile")
N_REAL, N_PAD, K = 10, 12, 4


def _model() -> ConGLUDe:
    cfg = ModelConfig(name="conglude", d_model=8, num_layers=1, num_heads=1, num_kv_heads=1, mlp_dim=0,
                      max_seq_len=N_PAD, model_options=(("num_virtual_nodes", K), ("projection", 8)))
    model = ConGLUDe(cfg, rngs=nnx.Rngs(0))
    # Non-zero biases and a coordinate scale of 1 so that every path (and the VN motion) shows in the outputs.
    state = nnx.state(model, nnx.Param)
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda p: p + 0.3 * jax.random.normal(next(keys), p.shape), state))
    return model


def _orthogonal(seed: int, reflect: bool) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.linalg.det(q))
    return q @ np.diag([1.0, 1.0, -1.0]) if reflect else q


@pytest.fixture(scope="module")
def outputs():
    """The model's outputs on [original, rotated+translated, reflected+translated, permuted, negative control]."""
    model = _model()
    rng = np.random.default_rng(0)
    points = np.zeros((N_PAD, 3), np.float32)
    points[:N_REAL] = conglude_data.compact_walk(N_REAL, rng)
    features = np.zeros((N_PAD, conglude_data.RESIDUE_FEATURES), np.float32)
    features[:N_REAL] = rng.normal(size=(N_REAL, conglude_data.RESIDUE_FEATURES))
    weights = (np.arange(N_PAD) < N_REAL).astype(np.float32)
    vn = np.asarray(model.virtual_node_init(jnp.asarray(points[None]), jnp.asarray(weights[None]),
                                            jax.random.key(3)))[0]
    shift = np.array([3.0, -7.0, 11.0], np.float32)
    rotation, reflection = _orthogonal(1, False), _orthogonal(2, True)
    residue_order = np.concatenate([rng.permutation(N_REAL), np.arange(N_REAL, N_PAD)])
    vn_order = np.array([2, 0, 3, 1])

    def moved(q):  # rotate/reflect real residues only (padding stays zero, as the data pipeline pads)
        return np.where(weights[:, None] > 0, points @ q.T + shift, 0.0)

    rows = [(points, features, vn), (moved(rotation), features, vn @ rotation.T + shift),
            (moved(reflection), features, vn @ reflection.T + shift),
            (points[residue_order], features[residue_order], vn[vn_order]),
            (moved(rotation), features, vn)]  # negative control: the sphere not rotated with the protein
    batch = [np.stack(column).astype(np.float32) for column in zip(*rows, strict=True)]
    masks = np.stack([weights, weights, weights, weights[residue_order], weights])
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, points, features, masks, vn, ligands):
        model = nnx.merge(graphdef, state)
        out = model(points, features, masks, vn_positions=vn)
        ell_p, ell_b = model.encode_ligands(ligands)
        return out, ell_p, ell_b, combined_scores(out, ell_p, ell_b)

    ligands = conglude_data.ligands(np.array([0, 1, 2, 3, -1]), rng)
    out, ell_p, ell_b, scores = forward(state, *map(jnp.asarray, (*batch[:2], masks, batch[2], ligands)))
    return {"out": jax.tree.map(np.asarray, out), "ell_p": np.asarray(ell_p), "ell_b": np.asarray(ell_b),
            "scores": np.asarray(scores), "rotation": rotation, "reflection": reflection, "shift": shift,
            "residue_order": residue_order, "vn_order": vn_order}


def test_e3_equivariance_with_rotation_translation_and_reflection(outputs):
    out = outputs["out"]
    for row, q in ((1, outputs["rotation"]), (2, outputs["reflection"])):
        np.testing.assert_allclose(out.vn_positions[row], out.vn_positions[0] @ q.T + outputs["shift"], atol=1e-4)
        for name in ("residue_logits", "confidence", "pockets", "protein"):
            np.testing.assert_allclose(getattr(out, name)[row], getattr(out, name)[0], atol=1e-4, err_msg=name)
        np.testing.assert_allclose(outputs["scores"][row], outputs["scores"][0], atol=1e-4)
    assert np.abs(out.vn_positions[0] - out.vn_positions[0].mean(0)).max() > 1.0  # VNs are spread, not collapsed


def test_negative_control_rotating_the_protein_but_not_the_sphere_changes_the_outputs(outputs):
    out = outputs["out"]
    assert np.abs(out.confidence[4] - out.confidence[1]).max() > 1e-3
    assert np.abs(out.vn_positions[4] - out.vn_positions[1]).max() > 1e-2


def test_permutation_invariance_of_the_protein_and_equivariance_among_residues_and_vns(outputs):
    out, order, vn_order = outputs["out"], outputs["residue_order"], outputs["vn_order"]
    np.testing.assert_allclose(out.protein[3], out.protein[0], atol=1e-5)
    np.testing.assert_allclose(out.residue_logits[3][:N_REAL], out.residue_logits[0][order][:N_REAL], atol=1e-4)
    for name in ("vn_positions", "confidence", "pockets"):
        np.testing.assert_allclose(getattr(out, name)[3], getattr(out, name)[0][vn_order], atol=1e-4, err_msg=name)


def test_embeddings_have_unit_norm_and_scores_lie_in_minus_two_two(outputs):
    out = outputs["out"]
    for value in (out.pockets, out.protein, outputs["ell_p"], outputs["ell_b"]):
        np.testing.assert_allclose(np.linalg.norm(value, axis=-1), 1.0, atol=1e-5)
    assert np.all(np.abs(outputs["scores"]) <= 2.0 + 1e-6)
    expected = (out.protein @ outputs["ell_p"].T)[:, None] + np.einsum("bkp,lp->bkl", out.pockets, outputs["ell_b"])
    np.testing.assert_allclose(outputs["scores"], expected, atol=1e-5)


def test_vn_position_loss_takes_the_closest_vn_and_only_it_gets_a_gradient():
    distances = jnp.array([[5.0, 0.5, 9.0, 3.0], [7.0, 8.0, 6.5, 12.0], [1.0, 1.0, 1.0, 1.0]])
    rows = jnp.array([1.0, 1.0, 0.0])  # the third row is padding
    loss, grad = jax.value_and_grad(vn_position_loss)(distances, rows)
    np.testing.assert_allclose(loss, (0.5 * 0.5**2 + (6.5 - 0.5)) / 2, rtol=1e-6)
    expected = np.zeros((3, 4))
    expected[0, 1], expected[1, 2] = 0.5 / 2, 1.0 / 2  # Huber'(0.5) = 0.5, Huber'(6.5) = δ = 1; mean over 2 rows
    np.testing.assert_allclose(grad, expected, atol=1e-7)


def test_info_nce_with_identical_embeddings_goes_to_zero_as_the_temperature_goes_to_zero():
    embeddings = np.linalg.qr(np.random.default_rng(0).normal(size=(8, 8)))[0][:5]  # 5 orthonormal unit rows
    rows, index = jnp.ones(5), jnp.arange(5)
    losses = [float(info_nce(jnp.asarray(embeddings @ embeddings.T) / t, index, rows)) for t in (1.0, 0.1, 0.01)]
    assert losses[0] > losses[1] > losses[2] and losses[2] < 1e-6
    np.testing.assert_allclose(losses[0], np.log(1 + 4 * np.exp(-1.0)), rtol=1e-5)  # −log(e / (e + 4))


def _numpy_layer_norm(values, gamma, beta):
    return (values - values.mean()) / (values.std() + 1e-5) * gamma + beta  # PyG graph mode, batch=None


def _numpy_mlp(params, x):
    (w1, b1), (w2, b2) = params
    hidden = x @ w1 + b1
    return (hidden / (1 + np.exp(-hidden))) @ w2 + b2  # Linear, (dropout: identity at eval), SiLU, Linear


def _numpy_egnn(p, h_src, x_src, h_dst, x_dst, senders, receivers, update_coords):
    """The official EGNNLayer's operations in order: message (pos_dir = pos_i − pos_j, dist, node_norm on x_i and
    x_j, message_net; coords_norm(pos_dir) · pos_net), aggregate (mean for both), update (update_net on [x, aggr],
    pos + aggr), residual."""
    pos_dir = x_dst[receivers] - x_src[senders]
    dist = np.linalg.norm(pos_dir, axis=-1, keepdims=True)
    inputs = np.concatenate([_numpy_layer_norm(h_dst[receivers], *p["norm"]),
                             _numpy_layer_norm(h_src[senders], *p["norm"]), dist], axis=-1)
    node_message = _numpy_mlp(p["message"], inputs)
    pos_message = pos_dir / np.maximum(dist, 1e-8) * p["scale"] * _numpy_mlp(p["position"], node_message)
    count = np.maximum(np.bincount(receivers, minlength=len(h_dst)), 1)[:, None]
    aggregated = np.zeros((len(h_dst), node_message.shape[1]))
    np.add.at(aggregated, receivers, node_message)
    aggregated_pos = np.zeros((len(h_dst), 3))
    np.add.at(aggregated_pos, receivers, pos_message)
    x_new = _numpy_mlp(p["update"], np.concatenate([h_dst, aggregated / count], axis=-1))
    return x_new + h_dst, x_dst + aggregated_pos / count if update_coords else x_dst


def _params(layer):
    def linear(mlp):
        return [(np.asarray(mlp.first.kernel[...]), np.asarray(mlp.first.bias[...])),
                (np.asarray(mlp.second.kernel[...]), np.asarray(mlp.second.bias[...]))]
    found = {"norm": (np.asarray(layer.norm.scale[...]), np.asarray(layer.norm.bias[...])),
             "message": linear(layer.message), "update": linear(layer.update)}
    if isinstance(layer, EGNNLayer):
        found |= {"position": linear(layer.position), "scale": float(layer.coord_scale[...][0])}
    return found


def test_egnn_layer_matches_a_numpy_transcription_of_the_official_layer_and_its_dense_form():
    rng = np.random.default_rng(5)
    f = 6
    layer = EGNNLayer(f, f, update_coords=True, rngs=nnx.Rngs(2))
    gnn = GNNLayer(f, f, rngs=nnx.Rngs(3))
    for module in (layer, gnn):  # fixed, non-trivial weights (norm affine, biases, scale included)
        state = nnx.state(module, nnx.Param)
        nnx.update(module, jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32) * 0.5, state))
    h_src, x_src = rng.normal(size=(5, f)), rng.normal(size=(5, 3)) * 3
    h_dst, x_dst = rng.normal(size=(4, f)), rng.normal(size=(4, 3)) * 3
    senders = np.array([0, 1, 2, 3, 4, 0, 2, 4, 1])  # receiver 3 gets no message (mean of nothing = 0)
    receivers = np.array([0, 0, 0, 1, 1, 2, 2, 2, 1])
    expected = _numpy_egnn(_params(layer), h_src, x_src, h_dst, x_dst, senders, receivers, True)
    as_f32 = [jnp.asarray(a, jnp.float32) for a in (h_src, x_src, h_dst, x_dst)]
    mask = jnp.ones(len(senders))
    got = layer(*as_f32, jnp.asarray(senders), jnp.asarray(receivers), mask)
    for value, reference in zip(got, expected, strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-4)
    adjacency = np.zeros((1, 4, 5))
    adjacency[0, receivers, senders] = 1.0
    dense = layer.dense(*(a[None] for a in as_f32), jnp.asarray(adjacency))
    for value, reference in zip(dense, got, strict=True):
        np.testing.assert_allclose(value[0], reference, rtol=1e-4, atol=1e-5)
    plain = gnn(as_f32[0], as_f32[2], jnp.asarray(senders), jnp.asarray(receivers), mask)
    np.testing.assert_allclose(gnn.dense(as_f32[0][None], as_f32[2][None], jnp.asarray(adjacency))[0], plain,
                               rtol=1e-4, atol=1e-5)
    # A padding edge (mask 0) changes nothing.
    padded = layer(*as_f32, jnp.asarray([*senders, 2]), jnp.asarray([*receivers, 3]), jnp.asarray([*mask, 0.0]))
    np.testing.assert_allclose(padded[0], got[0], atol=1e-6)


def test_metrics_on_known_cases():
    scores, labels = np.array([0.9, 0.8, 0.7, 0.1, 0.5]), np.array([1, 0, 1, 0, 0])
    assert conglude_metrics.auroc(scores, labels) == pytest.approx(5 / 6)
    assert conglude_metrics.enrichment_factor(scores, labels, fraction=0.2) == pytest.approx(1 / 0.4)
    assert conglude_metrics.target_rank(np.array([0.2, 0.9, 0.2]), 0) == 3  # ties count against it
    positions = np.array([[0.0, 0, 0], [1.0, 0, 0], [10.0, 0, 0], [10.5, 0, 0]])
    pockets = conglude_metrics.merge_virtual_nodes(positions, np.array([0.1, 0.9, 0.5, 0.2]), np.eye(4))
    np.testing.assert_allclose(pockets.positions, [[0.5, 0, 0], [10.25, 0, 0]])
    np.testing.assert_allclose(pockets.confidence, [0.9, 0.5])
    assert conglude_metrics.dcc_success(pockets, np.array([[10.0, 3.0, 0.0]])).tolist() == [False]
    assert conglude_metrics.dcc_success(pockets, np.array([[10.0, 3.0, 0.0], [0.0, 1.0, 0.0]])).tolist() == [True,
                                                                                                            True]
    assert conglude_metrics.pocket_selection(pockets, np.array([0.0, 0, 1, 0]), np.array([10.0, 0, 0]))
    with pytest.raises(ValueError, match="labels must hold both classes"):
        conglude_metrics.auroc(scores, np.ones(5))


def test_bad_input_is_a_value_error_naming_the_argument():
    model = _model()
    points, weights = jnp.zeros((1, N_PAD, 3)), jnp.ones((1, N_PAD))
    features = jnp.zeros((1, N_PAD, conglude_data.RESIDUE_FEATURES))
    with pytest.raises(ValueError, match=r"points must be finite; row 0, residue 3"):
        model(points.at[0, 3, 1].set(jnp.nan), features, weights)
    with pytest.raises(ValueError, match="vn_positions must be finite"):
        model(points, features, weights, vn_positions=jnp.full((1, K, 3), jnp.nan))
    with pytest.raises(ValueError, match=r"vn_positions must have shape \[B, K, 3\]"):
        model(points, features, weights, vn_positions=jnp.zeros((1, K + 1, 3)))
    with pytest.raises(ValueError, match="features"):
        model(points, features[..., :5], weights)
    with pytest.raises(ValueError, match="ligands"):
        model.encode_ligands(jnp.zeros((2, 7)))
    with pytest.raises(ValueError, match="conglude option 'encoder'"):
        ConGLUDe(ModelConfig(name="conglude", model_options=(("encoder", "gnn"),)), rngs=nnx.Rngs(0))


def test_ligand_features_from_smiles_and_molecules_without_atoms():
    pytest.importorskip("rdkit")
    from icml26zoo.bio.conglude_chem import ligand_features_from_smiles

    features = ligand_features_from_smiles(["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1"], bits=64)
    assert features.shape == (3, 64 + 8) and features.dtype == np.float32
    assert set(np.unique(features[:, :64])) <= {0.0, 1.0} and features[:, :64].sum(axis=1).min() > 0
    assert features[0, 64 + 7] == 3 and features[1, 64 + 7] == 7  # heavy atoms of ethanol and phenol
    for bad, message in ((["CCO", ""], r"smiles\[1\]"), (["C1CC"], r"smiles\[0\]"), ([], "smiles must be"),
                         ("CCO", "smiles must be")):
        with pytest.raises(ValueError, match=message):
            ligand_features_from_smiles(bad)
