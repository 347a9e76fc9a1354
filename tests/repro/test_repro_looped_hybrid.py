"""The looped/hybrid reproduction: bad inputs, the pattern syntax, each cell's config (the model, the objective,
row lengths equal to the task's rows), and the Dyck length evaluation against the recognizer's labels. The SMOKE
experiment itself runs in the experiment contract (tests/repro/test_experiments.py: the notebook at SMOKE,
one-line errors, outputs, resume through the command line)."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.repro import looped_hybrid
from icml26zoo.repro.common import Budget, Experiment
from icml26zoo.train.data.formal_languages import CLS, Dyck, DyckOptions, is_dyck

TINY = Budget(steps=20, batch_size=2, seq_len=13, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loops": ("log3",)}, r"option 'loops' must be an integer or one of \['log2', 'linear'\]"),
        ({"loops": ()}, "must each hold at least one value"),
        ({"patterns": ("gdn,attention",)}, "unknown mixer 'gdn'"),
        ({"patterns": ("attention+mamba3",)}, r"patterns\[i\]: .*unknown mixer 'mamba3'"),
        ({"patterns": ("attention,attention,deltanet",)}, "patterns.i. must have a number of mixers dividing"),
        ({"hybrid_layers": 0}, "hybrid_layers"),
        ({"prelude_layers": -1}, "prelude_layers"),
        ({"dyck_padding": 5}, r"the Dyck training length\) must be even and >= 4, got 7"),
        ({"dyck_eval_lengths": (8, 9)}, "dyck_eval_lengths.i. must be even"),
        ({"funccomp_values": (1,)}, "funccomp_values"),
        ({"eval_examples": 1}, "eval_examples"),
        ({"fast_compile": 1}, "fast_compile must be True or False, got 1"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        looped_hybrid.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_patterns_join_mixers_with_plus_on_the_command_line_and_commas_in_the_model():
    assert looped_hybrid._model_pattern("deltanet+attention") == "deltanet,attention"
    assert looped_hybrid._model_pattern("deltanet,attention") == "deltanet,attention"
    assert looped_hybrid._model_pattern(" attention ") == "attention"


def test_cell_configs_match_their_task_rows(tmp_path):
    experiment = Experiment(tmp_path / "run", budget=TINY)
    dyck = looped_hybrid._dyck_config(experiment, (("loops", "log2"),), 8, 4, 64, 0)
    assert (dyck.model.name, dyck.objective, dyck.seq_len) == ("looped", "membership", 8 + 4 + 1)
    assert dict(dyck.model.model_options)["loops"] == "log2" and dyck.data.data_dir.startswith(str(tmp_path))
    assert dict(dyck.data.task_options)["length"] == 8 and dyck.num_steps == TINY.steps
    funccomp = looped_hybrid._funccomp_config(experiment, "deltanet,attention", 16, 2, 4, 64, 0)
    assert (funccomp.model.name, funccomp.objective, funccomp.seq_len) == ("hybrid", "lm", 2 * 17 + 2)
    assert funccomp.model.num_layers == 4 and funccomp.model.vocab_size >= 2 + 16 + 2
    assert funccomp.data.data_dir.startswith(str(tmp_path))


class Oracle:
    """A stand-in model that classifies with the stack recognizer: logit 1 on column 1 for members, else column 0."""

    def __call__(self, tokens):
        tokens = np.asarray(tokens)
        assert np.all(tokens[:, -1] == CLS)
        logits = np.zeros((*tokens.shape, 3), np.float32)
        for row, symbols in enumerate(tokens):
            string = [int(s) - 5 for s in symbols if s >= 5]
            logits[row, -1, int(is_dyck(string, 2))] = 1.0
        return logits


def test_dyck_accuracy_reads_cls_against_the_generator_labels(monkeypatch):
    monkeypatch.setattr(looped_hybrid, "_forward", lambda model, tokens: model(tokens))
    assert looped_hybrid.dyck_accuracy(Oracle(), 10, 3, 32, 0) == 1.0
    rows, labels = Dyck.generate(DyckOptions(length=10, padding=3), 32, np.random.SeedSequence([0, 2]))
    assert rows.shape == (32, 10 + 3 + 2) and labels.mean() == 0.5
