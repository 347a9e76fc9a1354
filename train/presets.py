"""Builders shared by the small presets in configs/: one architecture shape, any registered mixer.

Every `<mixer>_tiny.py` preset is a 2-layer, 64-wide LM on the built-in byte corpus and every
`<mixer>_mqar.py` preset the same model on multi-query associative recall, so runs of different mixers
differ only in the mixer.
"""

from __future__ import annotations

from typing import Any

from train.config import DataConfig, OptimConfig, TrainConfig
from zoo.models.config import ModelConfig

Options = tuple[tuple[str, Any], ...]


def tiny_model(mixer: str, mixer_options: Options = (), *, vocab_size: int, max_seq_len: int) -> ModelConfig:
    """d_model 64, 2 layers, 4 query heads sharing 2 key/value heads."""
    return ModelConfig(
        name="llama", mixer=mixer, mixer_options=mixer_options, vocab_size=vocab_size, d_model=64, num_layers=2,
        num_heads=4, num_kv_heads=2, max_seq_len=max_seq_len,
    )


def tiny_byte_lm(mixer: str, mixer_options: Options = ()) -> TrainConfig:
    """50 steps of 8 x 64 bytes of the stdlib corpus: a quick smoke run, with a generated sample."""
    return TrainConfig(
        model=tiny_model(mixer, mixer_options, vocab_size=256, max_seq_len=256),
        data=DataConfig(name="pystdlib"),
        optim=OptimConfig(learning_rate=3e-3, warmup_steps=10),
        batch_size=8,
        seq_len=64,
        num_steps=50,
        log_every=5,
        eval_batches=4,
        checkpoint_every=25,
        sample_length=32,
    )


def tiny_mqar(mixer: str, mixer_options: Options = ()) -> TrainConfig:
    """120 steps of MQAR: 16 keys, 16 values, 4 pairs per example, 32 tokens per row.

    The vocabulary (64) covers padding + keys + values (33); the sizes match the trainer's own MQAR tests.
    """
    return TrainConfig(
        model=tiny_model(mixer, mixer_options, vocab_size=64, max_seq_len=64),
        data=DataConfig(
            name="mqar", mqar_num_keys=16, mqar_num_values=16, mqar_num_pairs=4, mqar_train_examples=2000,
            mqar_eval_examples=64,
        ),
        optim=OptimConfig(learning_rate=1e-2, warmup_steps=10),
        batch_size=16,
        seq_len=32,
        num_steps=120,
        log_every=10,
        eval_batches=2,
        checkpoint_every=60,
        sample_length=0,
    )
