"""What the command lines print: the zoo's own progress at INFO, third-party libraries only when they fail.

TFDS, absl, grain and Orbax report routine work (a dataset folder without metadata yet, a custom builder
config, a checkpoint written) at INFO or WARNING; in a tiny run those lines outnumber the zoo's own.
`--verbose` keeps them. A Python warning (e.g. a checkpoint skipped as unreadable, a metrics line skipped)
prints as one line `warning: ...`, without the source line the warnings module adds.
"""

from __future__ import annotations

import logging
import os
import warnings

__all__ = ["THIRD_PARTY_LOGGERS", "configure_logs", "one_line_warning"]

THIRD_PARTY_LOGGERS = ("absl", "tensorflow_datasets", "grain", "orbax", "jax._src.xla_bridge")


def configure_logs(*, verbose: bool = False) -> None:
    """The zoo's loggers at INFO; THIRD_PARTY_LOGGERS at ERROR unless `verbose` (then WARNING and up); warnings
    as one line (`one_line_warning`)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1" if verbose else "3")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("icml26zoo").setLevel(logging.INFO)
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
    warnings.formatwarning = one_line_warning


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     line: str | None = None) -> str:
    """`warning: <message>` on a single line: the default format adds the file, line and source line, which
    name the zoo's code rather than what the user should look at (the message names that)."""
    del category, filename, lineno, line
    return "warning: " + " ".join(str(message).split()) + "\n"
