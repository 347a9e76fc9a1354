"""Pieces of the Muon-fine-tuning reproduction (`icml26zoo.repro.muon_lora`): cell configs, the forgetting
evaluation on the pretraining data and the stable rank of the fine-tuning deltas."""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np
from flax import nnx

from icml26zoo.lora import merge_lora
from icml26zoo.optim.muon import muon_dimension_numbers, update_strength
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig, load_preset
from icml26zoo.train.loop import Run, build_run, build_train_model, evaluate

OPTIMIZERS = ("adamw", "muon")
PRETRAIN_FACTOR = 2  # the pretraining cell trains this many times the budget's steps


def pretrain_config(data_dir: pathlib.Path) -> TrainConfig:
    """The tiny Llama (2 layers, d 64) on the built-in Python byte corpus, AdamW (the preset's settings)."""
    config = load_preset("llama_tiny")
    return dataclasses.replace(config, data=dataclasses.replace(config.data, data_dir=str(data_dir)),
                               eval_batches=8)


def finetune_data(data_dir: pathlib.Path) -> DataConfig:
    """MQAR (16 keys, 16 values, 4 pairs per row): token ids < 33 of the byte model's 256, a task whose
    statistics share nothing with Python source, so fitting it must move the pretrained weights."""
    return DataConfig(name="mqar", data_dir=str(data_dir), mqar_num_keys=16, mqar_num_values=16,
                      mqar_num_pairs=4, mqar_train_examples=2000, mqar_eval_examples=64)


def finetune_config(pretrained: TrainConfig, init_from: pathlib.Path, data: DataConfig, *, optimizer: str,
                    rank: int, learning_rate: float) -> TrainConfig:
    """`pretrained`'s model fine-tuned from `init_from` on `data` with `optimizer` (rank 0: all parameters;
    r > 0: LoRA on every linear layer, α = 2r), constant warmup 10% then cosine, no weight decay."""
    optim = OptimConfig(name=optimizer, learning_rate=learning_rate, weight_decay=0.0,
                        warmup_steps=max(1, pretrained.num_steps // 10))
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


def stable_rank(delta: np.ndarray) -> float:
    """‖ΔW‖_F² / ‖ΔW‖_2² of one matrix (NaN for a zero update)."""
    if not np.any(delta):
        return float("nan")
    return float(update_strength(delta)["stable_rank"])


def mean_update_strength(before: dict, after: dict) -> dict[str, float]:
    """Stable rank and spectral entropy averaged over the changed matrices; mean ‖ΔW‖_F and ‖ΔW‖_2."""
    stats = [update_strength(d) for d in matrix_deltas(before, after) if np.any(d)]
    if not stats:
        return {"stable_rank": float("nan"), "spectral_entropy": float("nan"), "frobenius_norm": 0.0,
                "spectral_norm": 0.0}
    return {key: float(np.mean([float(s[key]) for s in stats])) for key in stats[0]}
