"""Pieces of the Muon-fine-tuning reproduction (`icml26zoo.repro.muon_lora`): cell configs, the forgetting
evaluation on the pretraining data and the stable rank of the fine-tuning deltas."""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.lora import merge_lora
from icml26zoo.optim.muon import muon_dimension_numbers, muon_finetune
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig
from icml26zoo.train.loop import evaluate
from icml26zoo.train.runs import Run, build_run, build_train_model
from icml26zoo.validation import check_int

OPTIMIZERS = ("adamw", "muon")
PRETRAIN_FACTOR = 2  # the pretraining cell trains this many times the budget's steps
DEFAULT_NS = ("standard", "float32")  # (ns_coeffs, ns_dtype) of every cell outside the Newton–Schulz ablation


def pretrain_config(data_dir: pathlib.Path, d_model: int = 64) -> TrainConfig:
    """The tiny Llama (2 layers, 4 query heads sharing 2 K/V heads, so K/V width d_model / 2) at width
    `d_model` on the built-in Python byte corpus, AdamW (the `llama_tiny` preset's other settings)."""
    if check_int("d_model", d_model, minimum=8) % 8:
        raise ValueError(f"d_model must be a multiple of 8 (4 heads of an even width), got {d_model!r}")
    config = load_preset("llama_tiny")
    return dataclasses.replace(config, model=dataclasses.replace(config.model, d_model=d_model),
                               data=dataclasses.replace(config.data, data_dir=str(data_dir)), eval_batches=8)


def finetune_data(data_dir: pathlib.Path) -> DataConfig:
    """MQAR (16 keys, 16 values, 4 pairs per row): token ids < 33 of the byte model's 256, a task whose
    statistics share nothing with Python source, so fitting it must move the pretrained weights."""
    return DataConfig(name="mqar", data_dir=str(data_dir), mqar_num_keys=16, mqar_num_values=16,
                      mqar_num_pairs=4, mqar_train_examples=2000, mqar_eval_examples=64)


def finetune_config(pretrained: TrainConfig, init_from: pathlib.Path, data: DataConfig, *, optimizer: str,
                    rank: int, learning_rate: float, ns: tuple[str, str] = DEFAULT_NS) -> TrainConfig:
    """`pretrained`'s model fine-tuned from `init_from` on `data` with `optimizer` (rank 0: all parameters;
    r > 0: LoRA on every linear layer, α = 2r), constant warmup 10% then cosine, no weight decay. `ns` =
    (ns_coeffs, ns_dtype) of Muon's Newton–Schulz; options are set only when they differ from DEFAULT_NS."""
    ns = tuple(ns)
    if ns != DEFAULT_NS and optimizer != "muon":
        raise ValueError(f"ns {ns!r} applies to optimizer 'muon' only, got optimizer {optimizer!r}")
    options = () if ns == DEFAULT_NS else (("ns_coeffs", ns[0]), ("ns_dtype", ns[1]))
    optim = OptimConfig(name=optimizer, learning_rate=learning_rate, weight_decay=0.0,
                        warmup_steps=max(1, pretrained.num_steps // 10), options=options)
    return dataclasses.replace(pretrained, data=data, optim=optim, init_from=str(init_from), lora_rank=rank,
                               lora_alpha=None, eval_batches=2)


def check_rank_fits(config: TrainConfig, ranks: tuple[int, ...]) -> None:
    """ValueError naming `ranks` when a rank exceeds an adapted layer's width (checked on the abstract model,
    before anything trains)."""
    for rank in ranks:
        if rank:
            try:
                nnx.eval_shape(lambda rank=rank: build_train_model(dataclasses.replace(config, lora_rank=rank)))
            except ValueError as error:
                raise ValueError(f"ranks: {error}") from None


def base_params(model: nnx.Module) -> dict:
    """The parameters of `model` with any LoRA adapters merged in: the plain model's pure dict."""
    return nnx.to_pure_dict(nnx.state(merge_lora(model), nnx.Param))


def pretraining_loss(run: Run, params: dict) -> float:
    """Loss (nats per byte) of `params` on the pretraining eval batches of `run` (a plain-model run)."""
    return float(evaluate(run, params)["eval/loss"])


def eval_run(config: TrainConfig) -> Run:
    """A compiled run of the plain pretraining model, for evaluating merged parameters of every cell."""
    return build_run(dataclasses.replace(config, init_from=None, lora_rank=0), jax.devices()[:1])[0]


def matrix_deltas(before: dict, after: dict) -> list[np.ndarray]:
    """ΔW per Muon-routed matrix (linear kernels; embeddings, head and norms excluded), per layer `[in, out]`."""
    dims = muon_dimension_numbers(before)
    flat_dims = jax.tree_util.tree_leaves(dims, is_leaf=lambda d: d is None or not isinstance(d, dict))
    deltas = []
    for dim, old, new in zip(flat_dims, jax.tree.leaves(before), jax.tree.leaves(after), strict=True):
        if dim is None:
            continue
        delta = np.asarray(new, np.float32) - np.asarray(old, np.float32)
        deltas.extend(delta.reshape(-1, *delta.shape[-2:]))
    return deltas


def spectral_stats(delta: np.ndarray) -> dict[str, float]:
    """`icml26zoo.optim.muon.update_strength` of a host matrix `[m, n]`, with NumPy's SVD: stable rank
    ‖ΔW‖_F² / ‖ΔW‖_2², σ-normalised spectral entropy over min(m, n) values, ‖ΔW‖_F and ‖ΔW‖_2. Host-side
    because the deltas already are NumPy arrays of many shapes (jnp would compile an SVD per shape)."""
    sigma = np.linalg.svd(np.asarray(delta, np.float64), compute_uv=False)
    p = sigma / max(sigma.sum(), 1e-30)
    nonzero = p[p > 0]
    return {"stable_rank": float(np.sum(sigma**2) / max(sigma[0] ** 2, 1e-30)),
            "spectral_entropy": float(-np.sum(nonzero * np.log(nonzero)) / np.log(max(sigma.size, 2))),
            "frobenius_norm": float(np.sqrt(np.sum(sigma**2))), "spectral_norm": float(sigma[0])}


def stable_rank(delta: np.ndarray) -> float:
    """‖ΔW‖_F² / ‖ΔW‖_2² of one matrix (NaN for a zero update)."""
    if not np.any(delta):
        return float("nan")
    return spectral_stats(delta)["stable_rank"]


def mean_update_strength(before: dict, after: dict) -> dict[str, float]:
    """Stable rank and spectral entropy averaged over the changed matrices; mean ‖ΔW‖_F and ‖ΔW‖_2."""
    stats = [spectral_stats(d) for d in matrix_deltas(before, after) if np.any(d)]
    if not stats:
        return {"stable_rank": float("nan"), "spectral_entropy": float("nan"), "frobenius_norm": 0.0,
                "spectral_norm": 0.0}
    return {key: float(np.mean([float(s[key]) for s in stats])) for key in stats[0]}


def conditioned_matrix(shape: tuple[int, int], condition: float, seed: int = 0) -> np.ndarray:
    """A `[m, n]` matrix U diag(σ) Vᵀ with random orthonormal U, V and σ log-spaced from 1 down to 1/condition:
    a stand-in for a gradient whose spectrum decays (real gradients are far from orthogonal)."""
    rng = np.random.default_rng(seed)
    k = min(shape)
    left, _ = np.linalg.qr(rng.standard_normal((shape[0], k)))
    right, _ = np.linalg.qr(rng.standard_normal((shape[1], k)))
    return (left * np.geomspace(1.0, 1.0 / condition, k)) @ right.T


def newton_schulz_singular_values(gradient: np.ndarray, ns: tuple[str, str]) -> np.ndarray:
    """Singular values of the zoo Muon's orthogonalised update of one `[in, out]` matrix with in >= out
    (first step, lr 1, no width scaling: the update is −NS(gradient)); ideally all 1."""
    if gradient.ndim != 2 or gradient.shape[0] < gradient.shape[1]:
        raise ValueError(f"gradient must be a matrix [in, out] with in >= out, got shape {gradient.shape}")
    optimizer = muon_finetune(1.0, consistent_rms=None, ns_coeffs=ns[0], ns_dtype=ns[1])
    params = {"kernel": np.zeros(gradient.shape, np.float32)}
    # One compiled program instead of optax's many eager ops (cheaper to compile).
    first_update = jax.jit(lambda g: optimizer.update(g, optimizer.init(params), params)[0]["kernel"])
    update = first_update({"kernel": gradient.astype(np.float32)})
    return np.linalg.svd(np.asarray(update, np.float32), compute_uv=False)


def orthogonality_error(ns: tuple[str, str], *, shape: tuple[int, int] = (384, 128), condition: float = 1e3,
                        seed: int = 0) -> dict[str, float]:
    """max |σ_i − 1| (and σ's range) of the NS output for a `conditioned_matrix`, per (ns_coeffs, ns_dtype)."""
    sigma = newton_schulz_singular_values(conditioned_matrix(shape, condition, seed), ns)
    return {"orth_error": float(np.max(np.abs(sigma - 1.0))), "sigma_min": float(sigma.min()),
            "sigma_max": float(sigma.max())}
