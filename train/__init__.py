"""The shared training loop: config, data, step, checkpoints, metrics, eval, CLI."""
