"""PCFG next-token prediction (docs/papers/pcfg_probing.md): a 2-layer, 64-wide Llama on sentences of a random
grammar (8 nonterminals, 16 terminals, at most 24 words), objective `pcfg_lm` (cross-entropy, plus the KL
to the grammar's exact next-token distribution as summed metrics: zoo/losses/pcfg_lm.py).

`python -m icml26zoo.train --config pcfg_tiny --workdir /tmp/pcfg` trains 400 steps of 32 sentences on CPU
(under two minutes on 2 cores). `python -m icml26zoo.repro pcfg_probing` trains it and reports the KL curve and the
per-layer probes. The objective must know the dataset's grammar: both get the same GRAMMAR pairs (another
grammar on the command line: give the same pairs to data.task_options and objective_options).
"""

from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig
from icml26zoo.train.presets import tiny_model

# One sentence of at most 24 words per row: <bos> + 24 words = 25 inputs.
MAX_LENGTH = 24
GRAMMAR = (("num_nonterminals", 8), ("num_terminals", 16), ("binary_rules", 4), ("terminal_rules", 4),
           ("binary_probability", 0.4), ("concentration", 1.0), ("grammar_seed", 0))


def get_config() -> TrainConfig:
    data = DataConfig(name="pcfg", task_options=(*GRAMMAR, ("max_length", MAX_LENGTH)))
    return TrainConfig(model=tiny_model("attention", vocab_size=32, max_seq_len=32), data=data,
                       optim=OptimConfig(learning_rate=3e-3, warmup_steps=20), objective="pcfg_lm",
                       objective_options=GRAMMAR, batch_size=32, seq_len=MAX_LENGTH + 1, num_steps=400, log_every=20,
                       eval_every=100, eval_batches=0, checkpoint_every=50, keep_checkpoints=9, sample_length=0)
