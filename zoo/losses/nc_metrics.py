"""Neural-collapse metrics: Papyan et al.'s NC1–NC4 and the geometry metrics of the NC-by-design paper
(arXiv 2605.20302).

All functions take numpy-convertible arrays and compute in float64 (covariance pseudo-inverses need it):
features h [N, D] with labels y [N] int in [0, K) (every class present), classifier / prototypes W [K, D].
Pass L2-normalised features and prototypes for the spec's hypersphere metrics (`nc_report` does).

    NC1   (1/K) tr(Σ_W Σ_B⁺)                           within- vs between-class variability → 0
    NC2   equinorm std_c‖μ_c − μ_G‖ / mean_c‖μ_c − μ_G‖ → 0;
          equiangularity mean_{c≠c'} |cos(μ_c − μ_G, μ_c' − μ_G) + 1/(K−1)| → 0
    NC3   ‖W/‖W‖_F − M/‖M‖_F‖_F², M = centred class means → 0 (self-duality)
    NC4   fraction of samples where argmax_c ⟨w_c, h⟩ ≠ the nearest class mean → 0
    instance alignment mean_i ‖w_{y_i} − h_i‖², prototype alignment mean_c ‖w_c − normalize(μ_c)‖² → 0
    erank(A) = exp(entropy(σ/‖σ‖₁)); prototype erank (covariance of the K rows of W) → K − 1;
    er_intra mean_c erank(within-class covariance) → 0, er_inter erank(cov of centred means) → K − 1
    MIR / HDR between the K×K Gram matrices of W and of the centred normalised class means → 1 / 0
"""

from __future__ import annotations

import numpy as np

# Singular values below this fraction of the largest (or all below it in absolute terms) count as zero.
RANK_TOLERANCE = 1e-9


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)


def _check(features: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    features, labels = np.asarray(features, np.float64), np.asarray(labels)
    if features.ndim != 2:
        raise ValueError(f"features must have shape [N, D], got shape {features.shape}")
    if labels.shape != (features.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be an integer array of shape [{features.shape[0]}], "
                         f"got {labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got values in [{labels.min()}, {labels.max()}]")
    missing = np.setdiff1d(np.arange(num_classes), labels)
    if missing.size:
        raise ValueError(f"labels: classes {missing.tolist()} have no samples (every class needs a class mean)")
    return features, labels


def _check_prototypes(prototypes: np.ndarray, num_classes: int, dim: int) -> np.ndarray:
    prototypes = np.asarray(prototypes, np.float64)
    if prototypes.shape != (num_classes, dim):
        raise ValueError(f"prototypes must have shape [{num_classes}, {dim}], got shape {prototypes.shape}")
    return prototypes


def class_means(features: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """μ [K, D]: the mean feature of each class."""
    features, labels = _check(features, labels, num_classes)
    sums = np.zeros((num_classes, features.shape[1]))
    np.add.at(sums, labels, features)
    return sums / np.bincount(labels, minlength=num_classes)[:, None]


def nc1(features: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """(1/K) tr(Σ_W Σ_B⁺) with Σ_W = mean_i (h_i − μ_{y_i})(·)ᵀ, Σ_B = mean_c (μ_c − μ_G)(·)ᵀ."""
    features, labels = _check(features, labels, num_classes)
    means = class_means(features, labels, num_classes)
    within = features - means[labels]
    sigma_w = within.T @ within / features.shape[0]
    between = means - features.mean(axis=0)
    sigma_b = between.T @ between / num_classes
    return float(np.trace(sigma_w @ np.linalg.pinv(sigma_b, rcond=1e-10, hermitian=True)) / num_classes)


def nc2(features: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[float, float]:
    """(equinorm, equiangularity) of the centred class means μ_c − μ_G."""
    features, labels = _check(features, labels, num_classes)
    centred = class_means(features, labels, num_classes) - features.mean(axis=0)
    norms = np.linalg.norm(centred, axis=1)
    cosines = _unit_rows(centred) @ _unit_rows(centred).T
    off_diagonal = ~np.eye(num_classes, dtype=bool)
    equiangular = np.mean(np.abs(cosines[off_diagonal] + 1.0 / (num_classes - 1)))
    return float(norms.std() / norms.mean()), float(equiangular)


def nc3(features: np.ndarray, labels: np.ndarray, prototypes: np.ndarray, num_classes: int) -> float:
    """‖W/‖W‖_F − M/‖M‖_F‖_F² with M the centred class means [K, D]."""
    features, labels = _check(features, labels, num_classes)
    weights = _check_prototypes(prototypes, num_classes, features.shape[1])
    centred = class_means(features, labels, num_classes) - features.mean(axis=0)
    difference = weights / np.linalg.norm(weights) - centred / np.linalg.norm(centred)
    return float(np.sum(difference**2))


def nc4(features: np.ndarray, labels: np.ndarray, prototypes: np.ndarray, num_classes: int,
        bias: np.ndarray | None = None) -> float:
    """Fraction of samples where the classifier argmax_c ⟨w_c, h⟩ (+ b_c) disagrees with the nearest class mean."""
    features, labels = _check(features, labels, num_classes)
    weights = _check_prototypes(prototypes, num_classes, features.shape[1])
    scores = features @ weights.T + (0.0 if bias is None else np.asarray(bias, np.float64))
    means = class_means(features, labels, num_classes)
    distances = np.sum((features[:, None, :] - means[None]) ** 2, axis=-1)
    return float(np.mean(np.argmax(scores, axis=1) != np.argmin(distances, axis=1)))


def instance_alignment(features: np.ndarray, labels: np.ndarray, prototypes: np.ndarray, num_classes: int) -> float:
    """mean_i ‖w_{y_i} − h_i‖² (pass unit rows for the spec's metric)."""
    features, labels = _check(features, labels, num_classes)
    weights = _check_prototypes(prototypes, num_classes, features.shape[1])
    return float(np.mean(np.sum((weights[labels] - features) ** 2, axis=1)))


def prototype_alignment(features: np.ndarray, labels: np.ndarray, prototypes: np.ndarray, num_classes: int) -> float:
    """mean_c ‖w_c − normalize(μ_c)‖² (self-duality of prototypes and class means)."""
    features, labels = _check(features, labels, num_classes)
    weights = _check_prototypes(prototypes, num_classes, features.shape[1])
    means = _unit_rows(class_means(features, labels, num_classes))
    return float(np.mean(np.sum((weights - means) ** 2, axis=1)))


def effective_rank(matrix: np.ndarray) -> float:
    """exp(entropy(σ / ‖σ‖₁)) over the singular values σ of `matrix`; 0 for a (numerically) zero matrix."""
    singular = np.linalg.svd(np.asarray(matrix, np.float64), compute_uv=False)
    if singular.size == 0 or singular.max() <= RANK_TOLERANCE:
        return 0.0
    singular = singular[singular > RANK_TOLERANCE * singular.max()]
    p = singular / singular.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def _covariance(rows: np.ndarray) -> np.ndarray:
    """Covariance [D, D] of the rows [n, D] as samples (divided by n, which erank ignores)."""
    centred = rows - rows.mean(axis=0)
    return centred.T @ centred / rows.shape[0]


def prototype_erank(prototypes: np.ndarray) -> float:
    """erank of the covariance of the K prototype rows; K − 1 for a simplex ETF."""
    prototypes = np.asarray(prototypes, np.float64)
    if prototypes.ndim != 2:
        raise ValueError(f"prototypes must have shape [K, D], got shape {prototypes.shape}")
    return effective_rank(_covariance(prototypes))


def embedding_erank(features: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[float, float]:
    """(er_intra, er_inter): mean over classes of erank(within-class covariance), erank(cov of centred means)."""
    features, labels = _check(features, labels, num_classes)
    means = class_means(features, labels, num_classes)
    intra = [effective_rank(_covariance(features[labels == c] - means[c])) for c in range(num_classes)]
    return float(np.mean(intra)), effective_rank(_covariance(means - features.mean(axis=0)))


def matrix_entropy(gram: np.ndarray) -> float:
    """H(K) = −Σ λ log λ over the eigenvalues λ of K / n (K [n, n] with unit diagonal, so Σ λ = 1)."""
    gram = np.asarray(gram, np.float64)
    eigenvalues = np.linalg.eigvalsh((gram + gram.T) / 2 / gram.shape[0])
    eigenvalues = eigenvalues[eigenvalues > RANK_TOLERANCE]
    return float(-np.sum(eigenvalues * np.log(eigenvalues)))


def information_ratios(features: np.ndarray, labels: np.ndarray, prototypes: np.ndarray,
                       num_classes: int) -> tuple[float, float]:
    """(MIR, HDR) between the Gram matrices of the unit prototypes and of the centred normalised class means.

    The class means are those of the unit features, normalised, centred by their mean and normalised again.
    MI = H1 + H2 − H(K1 ∘ K2), MIR = MI / min(H1, H2), HDR = |H1 − H2| / max(H1, H2). At an exact simplex ETF
    HDR = 0 but MIR = (2 log(K−1) − H(G ∘ G)) / log(K−1) < 1 (0.84 for K = 5, 0.95 for K = 10).
    """
    features, labels = _check(features, labels, num_classes)
    weights = _unit_rows(_check_prototypes(prototypes, num_classes, features.shape[1]))
    unit_means = _unit_rows(class_means(_unit_rows(features), labels, num_classes))
    # Centred by the mean of the unit class means, not the paper's normalised global mean: that mean
    # vanishes exactly at collapse (balanced ETF), where normalising it would amplify rounding noise.
    centred = _unit_rows(unit_means - unit_means.mean(axis=0))
    gram_w, gram_m = weights @ weights.T, centred @ centred.T
    h_w, h_m = matrix_entropy(gram_w), matrix_entropy(gram_m)
    mutual = h_w + h_m - matrix_entropy(gram_w * gram_m)
    return mutual / min(h_w, h_m), abs(h_w - h_m) / max(h_w, h_m)


def nc_report(features: np.ndarray, labels: np.ndarray, prototypes: np.ndarray, num_classes: int) -> dict[str, float]:
    """Every metric on the L2-normalised features [N, D] and prototypes [K, D], keyed by name."""
    features, labels = _check(features, labels, num_classes)
    unit, weights = _unit_rows(features), _unit_rows(_check_prototypes(prototypes, num_classes, features.shape[1]))
    equinorm, equiangular = nc2(unit, labels, num_classes)
    er_intra, er_inter = embedding_erank(unit, labels, num_classes)
    mir, hdr = information_ratios(unit, labels, weights, num_classes)
    return {"nc1": nc1(unit, labels, num_classes), "nc2_equinorm": equinorm, "nc2_equiangular": equiangular,
            "nc3": nc3(unit, labels, weights, num_classes), "nc4": nc4(unit, labels, weights, num_classes),
            "instance_alignment": instance_alignment(unit, labels, weights, num_classes),
            "prototype_alignment": prototype_alignment(unit, labels, weights, num_classes),
            "prototype_erank": prototype_erank(weights), "er_intra": er_intra, "er_inter": er_inter,
            "mir": mir, "hdr": hdr}
