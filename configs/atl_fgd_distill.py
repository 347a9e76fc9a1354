"""ATL + FGD: `atl_fgd_atl` with the FiLM-guided distillation teacher (icml26zoo.bio.rna_teacher.TinyRNALM, width
32, 2 blocks, 300 masked-LM steps on 4,096 grammar sequences, context embeddings: position i masked for z_i),
built once with the dataset (rna_hairpins option teacher_dim). `python -m icml26zoo.train --config
atl_fgd_distill --workdir /tmp/fgd`.
"""

import dataclasses

from icml26zoo.configs import atl_fgd_atl
from icml26zoo.train.config import TrainConfig

TEACHER_DIM = 32
TEACHER = (("teacher_dim", TEACHER_DIM), ("teacher_layers", 2), ("teacher_corpus", 4096), ("teacher_steps", 300))


def get_config() -> TrainConfig:
    config = atl_fgd_atl.get_config()
    model_options = dict(config.model.model_options) | {"teacher_dim": TEACHER_DIM}
    data_options = dict(config.data.task_options) | dict(TEACHER)
    return dataclasses.replace(
        config, model=dataclasses.replace(config.model, model_options=tuple(model_options.items())),
        data=dataclasses.replace(config.data, task_options=tuple(data_options.items())))
