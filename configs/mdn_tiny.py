"""A 2-layer, 64-wide Momentum DeltaNet (specs/mixers-02 §1, §1.1) on the built-in byte corpus.

The same shape and schedule as gated_deltanet_tiny with the "mdn" mixer: 4 value heads sharing 2 query/key heads
(num_kv_heads), short conv width 4, log μ floored at −2 and τ = √d_model (the 400M settings). Options:
`(('expand_v', 2),)` gives d_v = 2·d_k as at 400M; `(('min_log_mu', -1.0), ('tau_factor', 8.0))` the 1B gates.
"""

from train.config import DataConfig, OptimConfig, TrainConfig
from zoo.models.config import ModelConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(
            name="llama", mixer="mdn", vocab_size=256, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
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
