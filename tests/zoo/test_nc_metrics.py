"""NC1–NC4 and the geometry metrics (arXiv 2605.20302): closed forms at a simplex ETF, readable formulas,
random features."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml26zoo.losses import nc_metrics as m
from icml26zoo.losses.neural_collapse import simplex_etf

K, D = 5, 8


def etf_collapse(per_class=4):
    etf = simplex_etf(K, D).astype(np.float64)
    labels = np.repeat(np.arange(K), per_class)
    return etf[labels], labels, etf


def random_features(seed=0, n=60):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, D)), np.arange(n) % K, rng.normal(size=(K, D))


def test_perfect_simplex_etf_collapse():
    features, labels, etf = etf_collapse()
    report = m.nc_report(features, labels, etf, K)
    for name in ("nc1", "nc2_equinorm", "nc2_equiangular", "nc3", "nc4", "instance_alignment",
                 "prototype_alignment", "er_intra", "hdr"):
        assert report[name] == pytest.approx(0.0, abs=1e-6), name
    assert report["prototype_erank"] == pytest.approx(K - 1, abs=1e-6)
    assert report["er_inter"] == pytest.approx(K - 1, abs=1e-6)
    means = m.class_means(features, labels, K)
    cosines = means @ means.T
    np.testing.assert_allclose(cosines[~np.eye(K, dtype=bool)], -1.0 / (K - 1), atol=1e-6)
    # MIR at an exact ETF G = (K/(K−1))(I − 11ᵀ/K): H(G) = log(K−1); G∘G has eigenvalues (1 − a + aK)/K once
    # and (1 − a)/K K−1 times (a = 1/(K−1)²) after the 1/K scaling.
    a = 1.0 / (K - 1) ** 2
    eigenvalues = np.array([(1 - a + a * K) / K] + [(1 - a) / K] * (K - 1))
    h_g, h_gg = math.log(K - 1), -np.sum(eigenvalues * np.log(eigenvalues))
    assert report["mir"] == pytest.approx((2 * h_g - h_gg) / h_g, abs=1e-6)


def test_random_features_are_far_from_collapse():
    collapsed = m.nc_report(*etf_collapse(), K)
    features, labels, weights = random_features()
    random = m.nc_report(features, labels, weights, K)
    assert random["nc1"] > 1.0
    for name in ("nc2_equiangular", "nc3", "instance_alignment", "prototype_alignment", "hdr"):
        assert random[name] > 0.05 + collapsed[name], name
    assert random["er_intra"] > 3.0
    assert random["nc4"] > 0.2


def test_nc1_matches_the_papyan_formula():
    features, labels, _ = random_features(seed=1, n=30)
    mu = np.stack([features[labels == c].mean(0) for c in range(K)])
    mu_g = features.mean(0)
    sigma_w = sum(np.outer(f - mu[y], f - mu[y]) for f, y in zip(features, labels, strict=True)) / len(labels)
    sigma_b = sum(np.outer(mu[c] - mu_g, mu[c] - mu_g) for c in range(K)) / K
    want = np.trace(sigma_w @ np.linalg.pinv(sigma_b)) / K
    assert m.nc1(features, labels, K) == pytest.approx(want, rel=1e-8)


def test_nc2_nc3_nc4_match_their_formulas():
    features, labels, weights = random_features(seed=2, n=40)
    mu = np.stack([features[labels == c].mean(0) for c in range(K)])
    centred = mu - features.mean(0)
    norms = [np.linalg.norm(v) for v in centred]
    cos = [[float(centred[i] @ centred[j] / (norms[i] * norms[j])) for j in range(K)] for i in range(K)]
    equiangular = np.mean([abs(cos[i][j] + 1 / (K - 1)) for i in range(K) for j in range(K) if i != j])
    assert m.nc2(features, labels, K) == pytest.approx((np.std(norms) / np.mean(norms), equiangular), rel=1e-9)
    want_nc3 = np.sum((weights / np.linalg.norm(weights) - centred / np.linalg.norm(centred)) ** 2)
    assert m.nc3(features, labels, weights, K) == pytest.approx(want_nc3, rel=1e-9)
    disagree = [np.argmax(weights @ f) != np.argmin([np.sum((f - mu[c]) ** 2) for c in range(K)]) for f in features]
    assert m.nc4(features, labels, weights, K) == pytest.approx(np.mean(disagree))


def test_alignments_match_their_formulas():
    features, labels, weights = random_features(seed=3, n=20)
    want = np.mean([np.sum((weights[y] - f) ** 2) for f, y in zip(features, labels, strict=True)])
    assert m.instance_alignment(features, labels, weights, K) == pytest.approx(want)
    mu = np.stack([features[labels == c].mean(0) for c in range(K)])
    want = np.mean([np.sum((weights[c] - mu[c] / np.linalg.norm(mu[c])) ** 2) for c in range(K)])
    assert m.prototype_alignment(features, labels, weights, K) == pytest.approx(want)


def test_effective_rank_closed_forms():
    assert m.effective_rank(np.diag([2.0, 2.0, 0.0])) == pytest.approx(2.0)
    p = np.array([0.75, 0.25])
    assert m.effective_rank(np.diag([3.0, 1.0])) == pytest.approx(math.exp(-np.sum(p * np.log(p))))
    assert m.effective_rank(np.zeros((3, 3))) == 0.0
    assert m.matrix_entropy(np.eye(4)) == pytest.approx(math.log(4))


def test_bad_input_names_the_argument():
    features, labels, weights = random_features()
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 5\)"):
        m.nc1(features, labels + 1, K)
    with pytest.raises(ValueError, match=r"labels: classes \[4\] have no samples"):
        m.nc1(features[labels < 4], labels[labels < 4], K)
    with pytest.raises(ValueError, match="prototypes must have shape"):
        m.nc3(features, labels, weights[:, :3], K)
    with pytest.raises(ValueError, match="features must have shape"):
        m.nc1(features[0], labels[:1], K)
