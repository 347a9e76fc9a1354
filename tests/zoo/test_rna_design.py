"""ATL-FGD (icml26zoo.bio.rna_design): invariants 1-6 on tiny shapes, the fold metric, the data.

Test 2 is the official-code check: one GatedMPNNLayer with gate_kind="none", k_max = k and "sum_over_k" equals an
independent NumPy transcription of RDesign's MPNNLayer.forward (A4Bio/RDesign, model/module.py, commit
fa410a916f942a0dab7fb4b14d4e2342bcc88fff; with the encoder's h_EV = cat([h_E, h_V[src], h_V[dst]]) from
model/rdesign_model.py): message = W3 ReLU(W2 ReLU(W1 h_EV)), dh = Σ_j message / scale, h = LN(h + dh),
h = LN(h + W_b ReLU(W_a h)), torch LayerNorm eps 1e-5, on fixed weights.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.bio.rna_design import ATLFGDConfig, ATLFGDModel
from icml26zoo.bio.rna_features import RNABackboneFeaturizer
from icml26zoo.bio.rna_fold import auroc, base_pair_f1, design_metrics, nussinov
from icml26zoo.bio.rna_layers import GatedMPNNLayer
from icml26zoo.losses.rna import RNAObjectiveOptions, schedules
from icml26zoo.train.data.rna_hairpins import HairpinOptions, generate

pytestmark = pytest.mark.usefixtures("fast_compile")
B, L, D, K_MAX = 2, 24, 8, 6
CONFIG = ATLFGDConfig(hidden=D, n_enc=1, n_dec=1, k=3, k_max=K_MAX, num_rbf=4, teacher_dim=4, dropout=0.1)


@pytest.fixture(scope="module")
def backbones():
    """Two hairpins of 24 nucleotides padded to 26 (padding exercised): X [2, 26, 6, 3], mask, targets."""
    points, weights, targets = generate(HairpinOptions(max_length=L, noise_tenths=5), B, np.random.SeedSequence(3))
    pad = ((0, 0), (0, 2))
    X = np.pad(points, pad + ((0, 0),)).reshape(B, L + 2, 6, 3)
    return X, np.pad(weights, pad), np.pad(targets[..., 1], pad, constant_values=-1)


@pytest.fixture(scope="module")
def model():
    return ATLFGDModel(CONFIG, rngs=nnx.Rngs(0))


def _rotation(seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def test_featurizer_is_invariant_and_sorts_neighbours_without_padding(backbones):
    X, mask, _ = backbones
    featurize = jax.jit(RNABackboneFeaturizer(k_max=K_MAX, num_rbf=16, rbf_max=20.0).__call__)
    moved = X @ _rotation(0).T + np.array([3.0, -7.0, 11.0])
    a, b = featurize(jnp.asarray(X), jnp.asarray(mask)), featurize(jnp.asarray(moved, jnp.float32), jnp.asarray(mask))
    np.testing.assert_array_equal(a["nbr_idx"], b["nbr_idx"])
    # float32 coordinates of tens of Å: the features agree to 1e-5, except the quaternion's near-zero components
    # (0.5 sqrt(|1 ± R_xx ∓ ...|) amplifies the rotation matrix's ~1e-7 round-off near 0): 1e-4 there.
    np.testing.assert_allclose(a["node"], b["node"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(a["edge"][..., 4:], b["edge"][..., 4:], atol=1e-5, rtol=0)
    np.testing.assert_allclose(a["edge"][..., :4], b["edge"][..., :4], atol=1e-4, rtol=0)
    assert a["node"].shape == (B, L + 2, 101) and a["edge"].shape == (B, L + 2, K_MAX, 115)
    assert np.isfinite(a["edge"]).all() and np.isfinite(a["node"]).all()
    P = X[:, :, 0]
    idx, nbr_mask, seq = (np.asarray(a[k]) for k in ("nbr_idx", "nbr_mask", "sequential"))
    for row in range(B):
        for i in range(L):
            others = idx[row, i][seq[row, i] == 0]
            distance = np.linalg.norm(P[row, others] - P[row, i], axis=-1)
            assert np.all(np.diff(distance) >= -1e-4), (row, i, distance)
            assert np.all(others < L) and nbr_mask[row, i].all()  # 24 real nucleotides: padding never picked
            assert set(idx[row, i][seq[row, i] > 0]) == {j for j in (i - 1, i + 1) if 0 <= j < L}
    assert not nbr_mask[:, L:].any()


def _layer_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def _rdesign_layer(layer: GatedMPNNLayer, h: np.ndarray, e: np.ndarray, nbr_idx: np.ndarray, scale: float
                   ) -> np.ndarray:
    """NumPy transcription of RDesign's MPNNLayer on the dense layout (module docstring); LN weights are 1, 0."""
    p = {name: (np.asarray(getattr(layer, name).kernel[...], np.float64),
                np.asarray(getattr(layer, name).bias[...], np.float64))
         for name in ("W1", "W2", "W3", "ffn_in", "ffn_out")}
    relu = lambda x: np.maximum(x, 0.0)  # noqa: E731
    lin = lambda x, name: x @ p[name][0] + p[name][1]  # noqa: E731
    h_j = np.stack([h[b][nbr_idx[b]] for b in range(h.shape[0])])
    h_ev = np.concatenate([e, np.broadcast_to(h[:, :, None], e.shape), h_j], -1)
    dh = lin(relu(lin(relu(lin(h_ev, "W1")), "W2")), "W3").sum(axis=2) / scale
    h = _layer_norm(h + dh)
    return _layer_norm(h + lin(relu(lin(h, "ffn_in")), "ffn_out"))


def test_one_layer_equals_rdesign_reference_and_gate_mean_is_plain_mean_for_equal_logits():
    rng = np.random.default_rng(1)
    n, k = 7, 4
    h = rng.normal(size=(1, n, D)).astype(np.float32)
    e = rng.normal(size=(1, n, k, D)).astype(np.float32)
    nbr_idx = np.stack([rng.permutation(n)[:k] for _ in range(n)])[None].astype(np.int32)
    ones, zeros = np.ones((1, n, k), np.float32), np.zeros((1, n, k), np.float32)
    static = GatedMPNNLayer(D, gate_kind="none", aggregation="sum_over_k", k=k, density=0.5, tau=0.5,
                            dropout_rate=0.2, rngs=nnx.Rngs(2))
    out, gates = static(jnp.asarray(h), jnp.asarray(e), jnp.asarray(nbr_idx), jnp.asarray(ones), jnp.asarray(zeros))
    np.testing.assert_allclose(out, _rdesign_layer(static, h, e, nbr_idx, scale=k), atol=1e-6, rtol=0)
    np.testing.assert_array_equal(gates, ones)
    # Test 3: a concrete layer's zero-init gate head gives every candidate the same logit: gate_mean = plain mean.
    gated = GatedMPNNLayer(D, gate_kind="concrete", aggregation="gate_mean", k=2, density=0.3, tau=0.5,
                           dropout_rate=0.2, rngs=nnx.Rngs(2))
    out, gates = gated(jnp.asarray(h), jnp.asarray(e), jnp.asarray(nbr_idx), jnp.asarray(ones), jnp.asarray(zeros))
    np.testing.assert_allclose(gates, 0.3, atol=1e-6)
    # gate_mean divides by Σg + ε, so the plain mean holds up to ε / Σg = 1e-6 / 1.2.
    np.testing.assert_allclose(out, _rdesign_layer(gated, h, e, nbr_idx, scale=k), atol=1e-5, rtol=0)


def test_gates_mask_padding_exactly_fix_neighbours_and_are_noisy_only_in_training():
    layer = GatedMPNNLayer(D, gate_kind="hard_concrete", aggregation="gate_mean", k=2, density=0.5, tau=0.5,
                           dropout_rate=0.0, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    h, e = jnp.asarray(rng.normal(size=(1, 5, D)), jnp.float32), jnp.asarray(rng.normal(size=(1, 5, 3, D)), jnp.float32)
    nbr_idx = jnp.asarray(np.tile([[1, 2, 3]], (5, 1))[None], jnp.int32)
    nbr_mask = jnp.asarray([[[1, 1, 0]] * 5], jnp.float32)
    sequential = jnp.asarray([[[1, 0, 0]] * 5], jnp.float32)
    _, train = layer(h, e, nbr_idx, nbr_mask, sequential, jax.random.key(0))
    _, evaluation = layer(h, e, nbr_idx, nbr_mask, sequential)
    for gates in (train, evaluation):
        assert np.all(np.asarray(gates)[..., 2] == 0.0) and np.all(np.asarray(gates)[..., 0] == 1.0)
    np.testing.assert_allclose(evaluation[..., 1], 0.5, atol=1e-6)  # initial gates at the target density
    assert not np.allclose(train[..., 1], evaluation[..., 1])
    # A temperature given per call (an annealing schedule) replaces the layer's: the same one changes nothing.
    _, same = layer(h, e, nbr_idx, nbr_mask, sequential, jax.random.key(0), 0.5)
    _, hotter = layer(h, e, nbr_idx, nbr_mask, sequential, jax.random.key(0), 1.0)
    np.testing.assert_array_equal(same, train)
    assert not np.allclose(hotter[..., 1], train[..., 1]) and np.all(np.asarray(hotter)[..., 2] == 0.0)


def test_annealing_schedules_follow_the_spec():
    options = RNAObjectiveOptions(anneal_steps=100, tau_start=1.0)
    values = [schedules(options, 1.0, 0.3, jnp.int32(t)) for t in (0, 50, 100, 400)]
    np.testing.assert_allclose([float(v[0]) for v in values], [1.0, 0.5, 0.0, 0.0], atol=1e-6)  # cosine 1 -> 0
    np.testing.assert_allclose([float(v[1]) for v in values], [1.0, 0.65, 0.3, 0.3], atol=1e-6)  # linear 1 -> 0.3
    assert [float(v) for v in schedules(options, 1.0, 0.3, None)] == [0.0, pytest.approx(0.3)]  # evaluation: ends
    assert [float(v) for v in schedules(RNAObjectiveOptions(), 0.7, 0.5, jnp.int32(9))] == [
        pytest.approx(0.7), 0.5]  # no annealing: constant
    with pytest.raises(ValueError, match="anneal_steps"):
        RNAObjectiveOptions(anneal_steps=-1)


def test_model_eval_is_deterministic_teacher_free_and_film_starts_as_identity(model, backbones):
    X, mask, _ = backbones
    X, mask = jnp.asarray(X, jnp.float32), jnp.asarray(mask)
    teacher = jax.random.normal(jax.random.key(5), (B, L + 2, CONFIG.teacher_dim))
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, teacher, key):
        return nnx.merge(graphdef, state)(X, mask, teacher, key=key)

    @jax.jit
    def forward_plain(state):
        return nnx.merge(graphdef, state)(X, mask)

    logits, aux = forward(state, teacher, None)
    again, _ = forward(state, teacher, None)
    alone, alone_aux = forward_plain(state)
    np.testing.assert_array_equal(logits, again)  # test 4: no gate noise or dropout in evaluation
    np.testing.assert_array_equal(logits, alone)  # test 6: inference never reads the teacher
    np.testing.assert_array_equal(forward(state, 2.0 * teacher, None)[0], alone)
    np.testing.assert_array_equal(aux["h_s"], aux["h"])  # test 5: zero-init FiLM is the identity
    np.testing.assert_array_equal(aux["h_t"], aux["h"])
    assert aux["gates"].shape == (2, B, L + 2, K_MAX) and "teacher_logits" not in alone_aux
    noisy, noisy_aux = forward(state, teacher, jax.random.key(1))
    assert np.isfinite(noisy).all() and not np.array_equal(noisy, logits)
    assert np.all(np.asarray(noisy_aux["gates"])[:, :, L:] == 0.0)


def test_bad_inputs_name_the_argument(model, backbones):
    X, mask, _ = backbones
    nan = X.copy()
    nan[1, 3, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"X must be finite.*row 1, nucleotide 3"):
        model(jnp.asarray(nan, jnp.float32), jnp.asarray(mask))
    with pytest.raises(ValueError, match=r"X .*\[B, L, 6, 3\]"):
        model(jnp.zeros((B, L, 5, 3)), jnp.ones((B, L)))
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 6\], got 7"):
        ATLFGDConfig(k=7, k_max=6)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 48\], got 0"):
        ATLFGDConfig(k=0)
    with pytest.raises(ValueError, match="gate_kind"):
        ATLFGDConfig(gate_kind="soft")


def test_nussinov_folds_a_hairpin_and_metrics_score_it(backbones):
    sequence = np.array([2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1])  # GGGG AAAA CCCC
    partner = nussinov(sequence)
    np.testing.assert_array_equal(partner, [11, 10, 9, 8, -1, -1, -1, -1, 3, 2, 1, 0])
    assert base_pair_f1(partner, partner) == 1.0 and base_pair_f1(np.full(12, -1), partner) == 0.0
    metrics = design_metrics(sequence[None], sequence[None], partner[None], np.ones((1, 12)))
    assert metrics == {"recovery": 1.0, "pair_complementarity": 1.0, "bp_f1": 1.0}
    assert auroc(np.array([0.9, 0.1, 0.5]), np.array([1, 0, 0])) == 1.0
    assert auroc(np.array([0.5, 0.5]), np.array([1, 0])) == 0.5
    # The data: pair partners ~17.4 Å apart (P-P), sequential nucleotides inside a stem ~5.8 Å (0.5 Å noise).
    X, mask, partners = backbones
    P, part = X[0, :, 0], partners[0].astype(int)
    pairs = [(i, j) for i, j in enumerate(part) if j > i]
    stacked = [i for i in range(L - 1) if part[i] >= 0 and part[i + 1] >= 0 and part[i + 1] == part[i] - 1]
    assert pairs and all(15.0 < np.linalg.norm(P[i] - P[j]) < 20.0 for i, j in pairs)
    assert stacked and all(3.5 < np.linalg.norm(P[i] - P[i + 1]) < 8.0 for i in stacked)
