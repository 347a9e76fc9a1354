"""What the command lines print: the zoo's own progress at INFO, third-party libraries only when they fail.

TFDS, absl, grain and Orbax report routine work (a dataset folder without metadata yet, a custom builder
config, a checkpoint written) at INFO or WARNING; in a tiny run those lines outnumber the zoo's own.
`--verbose` keeps them.
"""

from __future__ import annotations

import logging
import os

__all__ = ["THIRD_PARTY_LOGGERS", "configure_logs"]

THIRD_PARTY_LOGGERS = ("absl", "tensorflow_datasets", "grain", "orbax", "jax._src.xla_bridge")


def configure_logs(*, verbose: bool = False) -> None:
    """The zoo's loggers at INFO; THIRD_PARTY_LOGGERS at ERROR unless `verbose` (then WARNING and up)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1" if verbose else "3")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("icml26zoo").setLevel(logging.INFO)
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
