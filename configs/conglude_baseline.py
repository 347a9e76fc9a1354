"""ConGLUDe's non-geometric baseline: `conglude` with encoder="mlp" (every message-passing layer replaced by a
per-residue residual MLP, the protein node the mean-pooled residue features, the virtual nodes left on their
initial sphere; no coordinate is read). Same data, objective and recipe, so the difference is what the geometry
buys. `python -m icml26zoo.train --config conglude_baseline --workdir /tmp/conglude_base`.
"""

import dataclasses

from icml26zoo.configs import conglude
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    config = conglude.get_config()
    options = dict(config.model.model_options) | {"encoder": "mlp"}
    return dataclasses.replace(config, model=dataclasses.replace(config.model, model_options=tuple(options.items())))
