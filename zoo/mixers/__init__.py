"""Sequence mixers. Importing this package registers every built-in mixer in zoo.registry.MIXERS.

The interface a mixer implements is documented in zoo/mixers/base.py.
"""

from icml26zoo.mixers import (
    attention,  # noqa: F401  (registers "attention")
    circulation,  # noqa: F401  (registers "circulation")
    delta_net,  # noqa: F401  (registers "deltanet", "gated_deltanet", "kda")
    fix,  # noqa: F401  (registers "fix")
    fox,  # noqa: F401  (registers "fox")
    goat,  # noqa: F401  (registers "goat")
    hyena,  # noqa: F401  (registers "hyena")
    mamba,  # noqa: F401  (registers "mamba")
    mamba2,  # noqa: F401  (registers "mamba2")
    mdn,  # noqa: F401  (registers "mdn")
    protot,  # noqa: F401  (registers "protot")
)
from icml26zoo.mixers.base import SequenceMixer, conformance_options

__all__ = ["SequenceMixer", "conformance_options"]
