"""The looped transformer (`model.name="looped"`) recognizing Dyck-2, read at `<cls>` (objective "membership").

Strings of 16 brackets over two types, 8 `<pad>` tokens of compute space, then `<cls>`: rows of 25 input tokens.
One tied attention layer after a one-layer prelude, looped T = ⌈log₂ 25⌉ = 5 times (the embedded input is
re-injected before every loop). Negatives are near misses (a positive with two symbols swapped), classes are
balanced: chance accuracy is 0.5.

`python -m icml26zoo.train --config configs/looped_dyck.py --workdir /tmp/looped_dyck` reports eval/accuracy.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

LENGTH, PADDING = 16, 8
# The string, the padding and <cls> (the pipeline drops the row's final <end>).
SEQ_LEN = LENGTH + PADDING + 1


def get_config() -> TrainConfig:
    data = DataConfig(name="dyck", task_options=(("length", LENGTH), ("padding", PADDING), ("num_types", 2),
                                                 ("train_examples", 8192), ("eval_examples", 512)))
    model = ModelConfig(name="looped", mixer="attention", vocab_size=16, d_model=64, num_layers=1, num_heads=4,
                        num_kv_heads=2, max_seq_len=64, model_options=(("loops", "log2"), ("prelude_layers", 1)))
    return TrainConfig(model=model, data=data, objective="membership",
                       optim=OptimConfig(learning_rate=3e-3, warmup_steps=20),
                       batch_size=32, seq_len=SEQ_LEN, num_steps=400, log_every=50, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0)
