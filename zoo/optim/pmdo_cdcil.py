"""A cross-domain class-incremental (CD-CIL) benchmark on 8×8 images and its metrics, for PMDO (`pmdo`).

Tasks t = 1..T each bring new classes (disjoint from earlier ones) in a new domain: a fixed transform of the
input. The five domains are the zoo's choice for an 8×8 digits task: identity; intensity inversion (16 − x); rotation by
90°; Gaussian blur (σ = 1 pixel) plus Gaussian noise (std 2 intensity levels); horizontal flip with contrast × 0.5.
Images are [N, 8, 8] intensities in [0, 16] (scikit-learn's digits, or `synthetic_images`, a seeded numpy
generator of class prototypes for tests and machines without scikit-learn).

Metrics on the accuracy matrix a[t, j] (after training task t, accuracy on task j's test set in its own domain,
no task id: the head covers every class seen so far; only j ≤ t is defined):
    A_t = accuracy on all seen tasks' test sets (pooled, or the mean of a[t, :t+1] with equal counts)
    Ā = mean_t A_t,  A_T = A at the last task,
    F = mean_{j<T} (max_{t<T} a[t, j] − a[T, j]),   BWT = mean_{j<T} (a[T, j] − a[j, j])  (GPM's definition).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from icml26zoo.validation import check_choice, check_int, check_interval, check_non_negative

__all__ = ["DOMAINS", "CDCILTask", "apply_domain", "cil_metrics", "make_tasks", "synthetic_images"]

DOMAINS = ("identity", "invert", "rot90", "blur_noise", "flip_contrast")
MAX_INTENSITY = 16.0
SIDE = 8
BLUR_SIGMA = 1.0
NOISE_STD = 2.0
CONTRAST = 0.5


class CDCILTask(NamedTuple):
    """One task: train_x float32 [n, 64] and test_x [m, 64] in [0, 1] (row-major pixels / 16), train_y int32 [n]
    and test_y [m] global class ids, classes (the task's class ids), domain (its transform's name)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: tuple[int, ...]
    domain: str


def _check_images(images: Any) -> np.ndarray:
    images = np.asarray(images, np.float64)
    if images.ndim != 3 or images.shape[1:] != (SIDE, SIDE):
        raise ValueError(f"images must be [N, {SIDE}, {SIDE}], got shape {images.shape}")
    return images


def _blur(images: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of [N, 8, 8] (radius 2σ, edge padding)."""
    radius = max(1, int(2 * sigma + 0.5))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    padded = np.pad(images, ((0, 0), (radius, radius), (radius, radius)), mode="edge")
    rows = sum(w * padded[:, i:i + SIDE, :] for i, w in enumerate(taps))
    return sum(w * rows[:, :, i:i + SIDE] for i, w in enumerate(taps))


def apply_domain(images: Any, domain: str, rng: np.random.Generator | None = None) -> np.ndarray:
    """images [N, 8, 8] in [0, 16] -> the same images in `domain` (one of DOMAINS), float32 in [0, 16].
    "blur_noise" draws its noise from `rng` (required there)."""
    check_choice("domain", domain, DOMAINS)
    images = _check_images(images)
    if domain == "identity":
        out = images
    elif domain == "invert":
        out = MAX_INTENSITY - images
    elif domain == "rot90":
        out = np.rot90(images, k=1, axes=(1, 2))
    elif domain == "blur_noise":
        if rng is None:
            raise ValueError("rng must be a numpy Generator for domain 'blur_noise', got None")
        out = _blur(images, BLUR_SIGMA) + rng.normal(0.0, NOISE_STD, images.shape)
    else:
        out = images[:, :, ::-1] * CONTRAST
    return np.clip(out, 0.0, MAX_INTENSITY).astype(np.float32)


def synthetic_images(n_per_class: int, num_classes: int = 10, *, seed: int = 0,
                     noise: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded digits-like set: per class a smooth random prototype (blurred noise, scaled to [0, 16]); each image
    is its prototype shifted by up to one pixel plus Gaussian noise of std `noise`, clipped to [0, 16].

    Returns (images float32 [num_classes · n_per_class, 8, 8], labels int32 [...]), grouped by class.
    """
    check_int("n_per_class", n_per_class)
    check_int("num_classes", num_classes)
    check_non_negative("noise", noise, finite=True)
    rng = np.random.default_rng(seed)
    protos = _blur(rng.normal(size=(num_classes, SIDE, SIDE)), 1.0)
    lo, hi = protos.min(axis=(1, 2), keepdims=True), protos.max(axis=(1, 2), keepdims=True)
    protos = MAX_INTENSITY * (protos - lo) / (hi - lo)
    labels = np.repeat(np.arange(num_classes), n_per_class)
    shifts = rng.integers(-1, 2, size=(labels.size, 2))
    images = np.stack([np.roll(protos[c], tuple(s), axis=(0, 1)) for c, s in zip(labels, shifts, strict=True)])
    images = np.clip(images + rng.normal(0.0, noise, images.shape), 0.0, MAX_INTENSITY)
    return images.astype(np.float32), labels.astype(np.int32)


def make_tasks(images: Any, labels: Any, *, classes_per_task: int = 2, domains: Sequence[str] = DOMAINS,
               train_fraction: float = 0.7, seed: int = 0) -> list[CDCILTask]:
    """Splits (images [N, 8, 8], labels [N]) into len(domains) tasks: task t holds classes
    t·c .. t·c + c − 1 (c = classes_per_task, in sorted label order) seen through domains[t], each class split
    train/test by `train_fraction` with a seeded shuffle."""
    images = _check_images(images)
    labels = np.asarray(labels)
    if labels.shape != (images.shape[0],):
        raise ValueError(f"labels must be [N] = [{images.shape[0]}], got shape {labels.shape}")
    check_int("classes_per_task", classes_per_task)
    check_interval("train_fraction", train_fraction, 0.0, 1.0, closed="neither")
    for domain in domains:
        check_choice("domains[i]", domain, DOMAINS)
    classes = np.unique(labels)
    needed = classes_per_task * len(domains)
    if not domains or classes.size < needed:
        raise ValueError(f"{len(domains)} domains x {classes_per_task} classes need >= {needed} classes and "
                         f">= 1 domain, got {classes.size} classes")
    rng = np.random.default_rng(seed)
    tasks = []
    for t, domain in enumerate(domains):
        chosen = tuple(int(c) for c in classes[t * classes_per_task:(t + 1) * classes_per_task])
        parts: dict[str, list[np.ndarray]] = {"train": [], "test": []}
        for c in chosen:
            index = rng.permutation(np.nonzero(labels == c)[0])
            cut = int(round(train_fraction * index.size))
            if cut < 1 or cut == index.size:
                raise ValueError(f"class {c} has {index.size} images: too few to split at {train_fraction}")
            parts["train"].append(index[:cut])
            parts["test"].append(index[cut:])
        split = {k: np.concatenate(v) for k, v in parts.items()}
        moved = {k: apply_domain(images[v], domain, rng).reshape(-1, SIDE * SIDE) / MAX_INTENSITY
                 for k, v in split.items()}
        tasks.append(CDCILTask(moved["train"].astype(np.float32), labels[split["train"]].astype(np.int32),
                               moved["test"].astype(np.float32), labels[split["test"]].astype(np.int32),
                               chosen, domain))
    return tasks


def cil_metrics(acc: Any, counts: Any = None) -> dict[str, Any]:
    """The CD-CIL scores of an accuracy matrix.

    Args:
      acc: a[t, j] [T, T], T >= 2; entries with j <= t in [0, 1] (the upper triangle is ignored).
      counts: test-set sizes [T] for the pooled A_t (None: every task counts equally).
    Returns:
      {"A_t": float [T], "A_bar": Ā, "A_T": A_T, "F": forgetting, "BWT": backward transfer}.
    """
    acc = np.asarray(acc, np.float64)
    if acc.ndim != 2 or acc.shape[0] != acc.shape[1] or acc.shape[0] < 2:
        raise ValueError(f"acc must be a square accuracy matrix [T, T] with T >= 2, got shape {acc.shape}")
    steps = acc.shape[0]
    lower = np.tril(np.ones((steps, steps), bool))
    if not np.all(np.isfinite(acc[lower])) or acc[lower].min() < 0 or acc[lower].max() > 1:
        raise ValueError("acc must hold accuracies in [0, 1] on and below the diagonal (j <= t)")
    weights = np.ones(steps) if counts is None else np.asarray(counts, np.float64)
    if weights.shape != (steps,) or np.any(weights <= 0):
        raise ValueError(f"counts must be [T] = [{steps}] positive test-set sizes, got {counts!r}")
    per_step = np.array([np.sum(acc[t, :t + 1] * weights[:t + 1]) / np.sum(weights[:t + 1]) for t in range(steps)])
    last = steps - 1
    best_before = np.array([acc[j:last, j].max() for j in range(last)])
    return {"A_t": per_step, "A_bar": float(per_step.mean()), "A_T": float(per_step[-1]),
            "F": float(np.mean(best_before - acc[last, :last])),
            "BWT": float(np.mean(acc[last, :last] - np.diag(acc)[:last]))}
