"""The demo: a 4-layer, 256-wide Llama-style byte LM on the Python standard library, ~5 min on 2 CPU cores.

250 steps of 16 x 256 bytes (about 1M tokens) take about 1.2 s each on a quiet 2-core machine.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import stdlib_lm


def get_config() -> TrainConfig:
    model = ModelConfig(name="llama", mixer="attention", vocab_size=256, d_model=256, num_layers=4, num_heads=4,
                        num_kv_heads=2)
    return stdlib_lm(model, warmup_steps=30, batch_size=16, seq_len=256, num_steps=250, log_every=10,
                     eval_every=125, eval_batches=20, checkpoint_every=125)
