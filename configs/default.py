"""The demo: a 4-layer, 128-wide Llama-style byte LM on the Python standard library, ~4.5 min on 2 CPU cores.

Chosen by measurement on a 2-core x86_64 machine (2026-12-06), against the previous demo (4 x 256 wide, 250
steps of 16 x 256 bytes: 3.13 bits/byte in ~5 min). At this budget the number of optimizer steps matters more
than width or context: 4 x 256 on 8 x 128 bytes (780 steps) reached 3.17, 4 x 128 on 32 x 256 bytes (180 steps)
3.42, while 4 x 128 on 16 x 64 bytes runs at ~0.13 s/step, so 1,900 steps fit and reach 2.36 at learning
rate 2e-3 (2.46 at 3e-3). Evaluated every 150 steps on 40 held-out batches, so the loss plot draws a curve.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import stdlib_lm


def get_config() -> TrainConfig:
    model = ModelConfig(name="llama", mixer="attention", vocab_size=256, d_model=128, num_layers=4, num_heads=4,
                        num_kv_heads=2)
    return stdlib_lm(model, warmup_steps=100, learning_rate=2e-3, batch_size=16, seq_len=64, num_steps=1900,
                     log_every=50, eval_every=150, eval_batches=40, checkpoint_every=950, sample_temperature=0.6)
