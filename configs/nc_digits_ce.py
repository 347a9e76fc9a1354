"""The nc_digits classifier trained with cross-entropy, the baseline: `objective="classification"`.

See configs/nc_digits.py.
"""

from icml26zoo.configs.nc_digits import digits_classifier
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    return digits_classifier("classification")
