"""Experiment presets: each module has `get_config() -> TrainConfig` (`python -m icml26zoo.train --config <file>`)."""
