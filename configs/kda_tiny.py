"""A 2-layer, 64-wide KDA, Kimi Delta Attention (specs/mixers-02 §1) on the built-in byte corpus.

The same shape and schedule as llama_tiny with the "kda" mixer: 4 value heads sharing 2 query/key heads
(num_kv_heads), short conv width 4. Options: the safe gate g ∈ (−5, 0): `(('safe_gate', True),)`.
"""

from train.config import DataConfig, OptimConfig, TrainConfig
from zoo.models.config import ModelConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(
            name="llama", mixer="kda", vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
            max_seq_len=256,
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
