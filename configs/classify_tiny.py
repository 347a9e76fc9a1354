"""Sequence classification: the 2-layer llama_tiny model on the synthetic `topics` task (4 classes).

`python -m icml26zoo.train --config configs/classify_tiny.py --workdir /tmp/cls` reports eval/accuracy against a
chance level of 0.25.
"""

from icml26zoo.train.config import TrainConfig
from icml26zoo.train.presets import tiny_classifier


def get_config() -> TrainConfig:
    return tiny_classifier("attention")
