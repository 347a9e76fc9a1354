"""A 2-layer, 64-wide GOAT (learned attention prior folded into q/k channels, specs/mixers-04)
on the built-in byte corpus.

The same shape and schedule as fox_tiny with the "goat" mixer;
options: `model.mixer_options`, e.g. (("pos_rank", 4),).
"""

from train.config import DataConfig, OptimConfig, TrainConfig
from zoo.models.config import ModelConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(
            name="llama", mixer="goat", vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
            mixer_options=(("pos_rank", 4),), max_seq_len=256,
        ),
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
