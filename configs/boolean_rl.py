"""RL vs SFT on sparse Boolean chains (arXiv 2511.17852): the one-layer transformer trained on 3-PARITY of
16 bits along its chain of thought by
policy-gradient RL with process rewards (objective `boolean_chain`, mode "rl": chains sampled from the model,
r_j = 1[step j is the correct bit], batch-mean baseline per step); width 32, batch 1024, Adam 1e-4.

    python -m icml26zoo.train --config boolean_rl --workdir /tmp/bool_rl

eval/accuracy is the greedy free-running step accuracy of the chain (chance 1/2 per step).
"""

from __future__ import annotations

from icml26zoo.configs.boolean_sft import boolean_chain
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    # The setting that learned 3-PARITY exactly by step 400 in the reproduction (docs/papers/rl_vs_sft_boolean.md);
    # at width 64, batch 256 and 1e-3 or 1e-4 RL stalled on a confident plateau.
    return boolean_chain("rl", learning_rate=1e-4, num_steps=1000, d_model=32, batch_size=1024)
