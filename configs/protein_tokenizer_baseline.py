"""The protein tokenizer without nested dropout: the ablation baseline of `protein_tokenizer` (same model, data,
objective and recipe; every token is kept in every training step), so only the ordering of the tokens differs.
`python -m icml26zoo.train --config protein_tokenizer_baseline --workdir /tmp/tok_base`.
"""

import dataclasses

from icml26zoo.configs import protein_tokenizer
from icml26zoo.train.config import TrainConfig


def get_config() -> TrainConfig:
    config = protein_tokenizer.get_config()
    options = dict(config.model.model_options) | {"nested_dropout": False}
    return dataclasses.replace(config, model=dataclasses.replace(config.model, model_options=tuple(options.items())))
