"""The `pcfg` dataset: rows are <bos> sentence <eos> of the options' grammar with their parse-tree facts, seeds
reproduce, bad options (a non-terminating grammar first) name data.task_options, and one pass through the
pipeline gives one weighted sentence per row."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.pcfg import exact
from icml26zoo.train import data as data_lib
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import pcfg

OPTIONS = pcfg.PCFGOptions(num_nonterminals=5, num_terminals=6, binary_rules=3, terminal_rules=3, max_length=12)


def test_rows_hold_sentences_of_the_grammar_with_their_tree_facts():
    rows = pcfg.sample_rows(OPTIONS, 200, np.random.SeedSequence([4, 0]))
    again = pcfg.sample_rows(OPTIONS, 200, np.random.SeedSequence([4, 0]))
    other = pcfg.sample_rows(OPTIONS, 200, np.random.SeedSequence([4, 1]))
    for name in rows:
        np.testing.assert_array_equal(rows[name], again[name])
    assert not np.array_equal(rows["tokens"], other["tokens"])
    grammar = pcfg.grammar_of(OPTIONS)
    lengths = rows["lengths"]
    assert rows["tokens"].shape == (200, 14) and lengths.min() >= 2 and lengths.max() <= 12
    for tokens, depth, boundary, n in zip(rows["tokens"], rows["depth"], rows["boundary"], lengths, strict=True):
        assert tokens[0] == pcfg.BOS and tokens[n + 1] == pcfg.EOS and not tokens[n + 2 :].any()
        words = tokens[1 : n + 1] - pcfg.FIRST_TERMINAL
        assert exact.sentence_probability(grammar, words) > 0
        # A full binary tree: its leaves' depths satisfy Kraft's equality, and the root closes at the last word.
        assert np.sum(2.0 ** -depth[1 : n + 1]) == pytest.approx(1.0) and depth[1 : n + 1].min() >= 1
        assert boundary[n] == 1 and boundary[1 : n + 1].sum() <= n - 1
        assert not depth[[0, *range(n + 1, 14)]].any() and not boundary[[0, *range(n + 1, 14)]].any()
    # Sentence lengths follow the grammar's length distribution conditioned on length <= max_length.
    expected = exact.length_distribution(grammar, 12)
    frequencies = np.bincount(lengths, minlength=13) / lengths.size
    assert np.abs(frequencies - expected / expected.sum()).max() < 0.1


@pytest.mark.parametrize("options, message", [
    ((("binary_probability", 0.5),), "option 'binary_probability': binary_probability = 0.5 gives an impossible "
                                     "grammar: grammar.binary: the grammar does not terminate"),
    ((("binary_probability", 1.5),),
     "option 'binary_probability': binary_probability must be a number in \\(0, 1\\), got 1.5"),
    ((("max_length", 65),), "option 'max_length' must be an integer in \\[2, 64\\]"),
    ((("num_nonterminals", 3), ("binary_rules", 5)), "option 'binary_rules' must be an integer in \\[1, 4\\]"),
    ((("concentration", 0.0),), "option 'concentration': concentration must be a finite positive number, got 0.0"),
])
def test_bad_options_name_the_field(options, message):
    with pytest.raises(ValueError, match="data.task_options") as error:
        DataConfig(name="pcfg", task_options=options)
    assert error.match(message)


def test_builds_offline_and_feeds_one_sentence_per_row(tmp_path):
    options = (("train_examples", 16), ("eval_examples", 4), ("max_length", 12), ("num_terminals", 6))
    data = DataConfig(name="pcfg", data_dir=str(tmp_path), task_options=options)
    assert data_lib.vocab_size(data) == 9
    batch = next(data_lib.make_train_iterator(data, batch_size=4, seq_len=13, seed=0, process_count=1))
    for inputs, targets, weights, segments in zip(batch["inputs"], batch["targets"], batch["weights"],
                                                   batch["segment_ids"], strict=True):
        n = int(weights.sum()) - 1
        assert inputs[0] == pcfg.BOS and targets[n] == pcfg.EOS and (segments[: n + 1] == 1).all()
        np.testing.assert_array_equal(inputs[1 : n + 1], targets[:n])
        assert not segments[n + 1 :].any()
    with pytest.raises(ValueError, match="seq_len must be >= 13"):
        data_lib.make_train_iterator(data, batch_size=4, seq_len=12, seed=0, process_count=1)
