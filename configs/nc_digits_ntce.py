"""The nc_digits classifier trained with NTCE: `objective="nc_ntce_k10"` (see configs/nc_digits.py)."""

from icml26zoo.configs.nc_digits import digits_classifier
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    return digits_classifier("nc_ntce_k10")
