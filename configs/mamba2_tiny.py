"""A 2-layer, 64-wide Mamba2 (SSD, specs/mixers-03 §4) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "mamba2" mixer: expand 2 (d_inner 128), head_dim 16
(from d_model / num_heads, so H = 8 SSD heads), state size N = 16, conv width 4, chunk 64 (spec 06's small
settings). The generalized diagonal decay: `model.mixer_options="(('decay', 'diagonal'),)"`.
"""

from train.config import DataConfig, OptimConfig, TrainConfig
from zoo.models.config import ModelConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(
            name="llama", mixer="mamba2", vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
            max_seq_len=256, mixer_options=(("decay", "scalar"), ("state_size", 16)),
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
