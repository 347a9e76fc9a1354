"""PUMA (arXiv 2602.10314) through the trainer: the stateless "puma" objective (K = 4 replayed phases) on bytes.

A 2-layer, 64-wide bidirectional denoiser (circulation attention with causal=False at alpha = beta = 1: plain
softmax attention without a causal mask) on the stdlib byte corpus; the vocabulary is 257 so that the mask id
(vocab_size - 1 = 256) is no byte. `configs/puma_random_tiny.py` is the same run with random masking. No
generated sample: the trainer's sampler decodes left to right, which a bidirectional model cannot; use
`icml26zoo.losses.masked_sampler.sample`. The reproduction (`python -m icml26zoo.repro puma`) runs the stateful pool.

    python -m icml26zoo.train --config configs/puma_tiny.py --workdir /tmp/puma_tiny
"""

import dataclasses

from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import tiny_byte_lm

OBJECTIVE = "puma"


def masked_diffusion_preset(objective: str) -> TrainConfig:
    config = tiny_byte_lm("circulation", (("causal", False),))
    model = dataclasses.replace(config.model, vocab_size=257)
    return dataclasses.replace(config, model=model, objective=objective, sample_length=0, num_steps=200,
                               log_every=20, checkpoint_every=100)


def get_config() -> TrainConfig:
    return masked_diffusion_preset(OBJECTIVE)
