"""A hybrid linear/full-attention stack (`model.name="hybrid"`) on 2-sequential function composition.

Two random maps f_1, f_2 : [8] -> [8] written as tables, a start value x, and the answer f_2(f_1(x)) as the last
token (`data.name="function_composition"`, 21 tokens per example); objective "lm" puts the loss on the answer
alone, so eval/accuracy is the answer accuracy (chance 1/8). Four layers follow the pattern
"deltanet,attention" twice: two DeltaNet (linear-attention) layers and two softmax-attention layers, the
paper's L-sequential task with L = 2 and L full-attention layers (the theory's L + 1 = 3 suffice, L - 1 = 1 do
not, asymptotically in the table size).

`python -m icml26zoo.train --config configs/hybrid_funccomp.py --workdir /tmp/hybrid_funccomp`.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_VALUES, NUM_FUNCTIONS = 8, 2
# L (n + 1) + 3 tokens per example; the pipeline predicts from all but the last.
SEQ_LEN = NUM_FUNCTIONS * (NUM_VALUES + 1) + 2
PATTERN = "deltanet,attention"


def get_config() -> TrainConfig:
    data = DataConfig(name="function_composition",
                      task_options=(("num_values", NUM_VALUES), ("num_functions", NUM_FUNCTIONS),
                                    ("train_examples", 16384), ("eval_examples", 512)))
    model = ModelConfig(name="hybrid", mixer="attention", vocab_size=16, d_model=64, num_layers=4, num_heads=4,
                        num_kv_heads=2, max_seq_len=64, scan_layers=False, model_options=(("pattern", PATTERN),))
    return TrainConfig(model=model, data=data, objective="lm",
                       optim=OptimConfig(learning_rate=3e-3, warmup_steps=20),
                       batch_size=32, seq_len=SEQ_LEN, num_steps=600, log_every=50, eval_every=200,
                       eval_batches=0, checkpoint_every=0, sample_length=0)
