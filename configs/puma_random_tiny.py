"""The PUMA baseline through the trainer: the "mdlm" objective (random masking) with the model and data of
configs/puma_tiny.py; its eval/loss is the negative ELBO per byte in nats.

    python -m icml26zoo.train --config configs/puma_random_tiny.py --workdir /tmp/puma_random_tiny
"""

from icml26zoo.configs.puma_tiny import masked_diffusion_preset
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    return masked_diffusion_preset("mdlm")
