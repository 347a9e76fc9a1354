"""Synthetic multimodal sentiment data (MSA) with missing modalities, for the API reproduction.

A latent sentiment y ~ Uniform[-3, 3]; each modality m is a sequence whose signal direction turns with y
(`synthetic_msa`), plus z_m · b_m(t) with z_m ~ N(0, 1) a per-sample nuisance unrelated to y, plus iid Gaussian
noise of std σ_m; the patterns are drawn once from `world_seed`. Widths text 32, audio 8, vision 12; the text
is the most informative modality (largest signal, widest), as in CMU-MOSI; missingness: an availability mask.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from icml26zoo.validation import check_int, check_interval, check_positive

__all__ = ["MSAConfig", "missing_mask", "synthetic_msa"]


@dataclasses.dataclass(frozen=True)
class MSAConfig:
    """dims: (text, audio, vision) widths; seq_len: T; signal: s_m; noise: σ_m; nuisance: amplitude of z_m·b_m;
    world_seed: seed of the fixed patterns a_m, b_m (the same "world" for train and test)."""

    dims: tuple[int, int, int] = (32, 8, 12)
    seq_len: int = 20
    signal: tuple[float, float, float] = (1.0, 0.6, 0.6)
    noise: tuple[float, float, float] = (2.0, 2.0, 2.0)
    nuisance: float = 1.0
    world_seed: int = 1234

    def __post_init__(self) -> None:
        check_int("seq_len", self.seq_len)
        check_int("world_seed", self.world_seed, minimum=0)
        check_positive("nuisance", self.nuisance, finite=True)
        for i in range(3):
            check_int(f"dims[{i}]", self.dims[i])
            check_positive(f"signal[{i}]", self.signal[i], finite=True)
            check_positive(f"noise[{i}]", self.noise[i], finite=True)


def _patterns(config: MSAConfig) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per modality (a_m, c_m, b_m), each [T, D_m]: a_m and c_m are random directions (unit RMS) modulated over
    time by 1 + 0.5 cos(ωt + φ), so their temporal means keep the direction; b_m (the nuisance) is a pure cosine
    per feature (temporal mean near zero)."""
    rng = np.random.default_rng(config.world_seed)
    t = np.arange(config.seq_len)[:, None]
    out = []
    for width in config.dims:
        def wave(size: int) -> np.ndarray:
            return np.cos(2 * np.pi * rng.uniform(0.05, 0.4, size=size) * t + rng.uniform(0, 2 * np.pi, size=size))

        a = rng.normal(size=width) * (1.0 + 0.5 * wave(width))
        c = rng.normal(size=width) * (1.0 + 0.5 * wave(width))
        out.append((a, c, np.sqrt(2.0) * wave(width)))
    return out


def synthetic_msa(num_samples: int, seed: int, config: MSAConfig = MSAConfig()) -> dict[str, np.ndarray]:
    """{"text" [N, T, 32], "audio" [N, T, 8], "vision" [N, T, 12] float32, "labels" [N] float32 in [-3, 3]}.

    x_m(t) = s_m (cos φ(y) a_m(t) + sin φ(y) c_m(t)) + z_m b_m(t) + σ_m ε, φ(y) = π (y + 3) / 6: the sentiment
    turns the direction of the signal (from a_m at y = -3 to -a_m at y = 3), so classes differ in direction, which
    is what SCOPE's cosine similarities of temporal means can see.
    """
    check_int("num_samples", num_samples)
    check_int("seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    labels = rng.uniform(-3.0, 3.0, size=num_samples)
    angle = (np.pi * (labels + 3.0) / 6.0)[:, None, None]
    data = {"labels": labels.astype(np.float32)}
    for name, (a, c, b), width, signal, noise in zip(("text", "audio", "vision"), _patterns(config), config.dims,
                                                     config.signal, config.noise, strict=True):
        z = rng.normal(size=(num_samples, 1, 1))
        x = (signal * (np.cos(angle) * a + np.sin(angle) * c) + config.nuisance * z * b
             + noise * rng.normal(size=(num_samples, config.seq_len, width)))
        data[name] = x.astype(np.float32)
    return data


def missing_mask(num_samples: int, missing_rate: float, seed: int) -> np.ndarray:
    """Availability [N, 3] bool: each modality of each sample missing with probability `missing_rate`; a sample
    that lost all three gets one back, chosen uniformly (at least one modality is always present)."""
    check_int("num_samples", num_samples)
    check_interval("missing_rate", missing_rate, 0.0, 1.0, closed="left")
    rng = np.random.default_rng(seed)
    available = rng.uniform(size=(num_samples, 3)) >= missing_rate
    empty = ~available.any(axis=1)
    available[np.flatnonzero(empty), rng.integers(0, 3, size=int(empty.sum()))] = True
    return available
