"""A 2-layer, 64-wide Llama for tests and quick experiments (byte corpus; `data.name=mqar` for recall)."""

from icml26zoo.train.presets import tiny_byte_lm


def get_config():
    return tiny_byte_lm("attention")
