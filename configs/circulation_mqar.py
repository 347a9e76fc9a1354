"""A 2-layer, 64-wide circulation attention (logits M_sym + α·M_skew, specs/mixers-08)
on multi-query associative recall (MQAR).

The same data and schedule as fox_mqar with the "circulation" mixer;
options: `model.mixer_options`, e.g. (("alpha", 1.05),).
"""

from train.config import DataConfig, OptimConfig, TrainConfig
from zoo.models.config import ModelConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(
            name="llama", mixer="circulation", vocab_size=64, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
            mixer_options=(("alpha", 1.05),), max_seq_len=64,
        ),
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
