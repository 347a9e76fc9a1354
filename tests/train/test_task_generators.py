"""The synthetic task generators (Dyck-k, palindromes, BFVP and function composition for the looped and
hybrid transformer papers; k-sparse Boolean chains for RL vs SFT): each generator's statistics against its
definition, checked by references written here independently of the modules' recognizers; seeds; option
validation; one pass through the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.train import data as data_lib
from icml26zoo.train.config import DataConfig, apply_overrides
from icml26zoo.train.data import formal_languages as fl
from icml26zoo.train.data import function_composition as fc
from icml26zoo.train.data import sparse_boolean as sb

SEED = np.random.SeedSequence([7, 0])


def _symbols(tokens: np.ndarray, options: fl.LanguageOptions) -> list[list[int]]:
    """The string part of each row as symbols 0, 1, ... (tail checked: P pads, <cls>, <end>)."""
    tail = tokens[:, options.length :]
    np.testing.assert_array_equal(tail, np.broadcast_to([fl.PAD] * options.padding + [fl.CLS, fl.END], tail.shape))
    return (tokens[:, : options.length] - fl.FIRST_SYMBOL).tolist()


def _dyck_by_reduction(symbols: list[int], k: int) -> bool:
    text = "".join("([{<"[s] if s < k else ")]}>"[s - k] for s in symbols)
    while any(pair in text for pair in ("()", "[]", "{}", "<>")):
        for pair in ("()", "[]", "{}", "<>"):
            text = text.replace(pair, "")
    return text == ""


def _bfvp_right_to_left(symbols: list[int]) -> bool:
    """Prefix evaluation with a value stack, scanning from the right; False when not well formed."""
    stack = []
    for symbol in reversed(symbols):
        if symbol in (fl.FALSE, fl.TRUE):
            stack.append(symbol)
        elif symbol == fl.NOT and stack:
            stack.append(1 - stack.pop())
        elif symbol in (fl.AND, fl.OR) and len(stack) >= 2:
            left, right = stack.pop(), stack.pop()
            stack.append(left & right if symbol == fl.AND else left | right)
        else:
            return False
    return stack == [1]


@pytest.mark.parametrize("num_types", [1, 2, 3])
def test_dyck_labels_balance_and_near_misses(num_types):
    options = fl.DyckOptions(num_types=num_types, length=16, padding=3)
    tokens, labels = fl.Dyck.generate(options, 300, SEED)
    assert tokens.shape == (300, 16 + 3 + 2) and labels.sum() == 150
    strings = _symbols(tokens, options)
    assert [int(_dyck_by_reduction(s, num_types)) for s in strings] == labels.tolist()
    for string in strings:
        # Near misses keep every symbol count: each type opens as often as it closes.
        counts = np.bincount(string, minlength=2 * num_types)
        np.testing.assert_array_equal(counts[:num_types], counts[num_types:])
    assert fl.is_dyck([0, 1, 3, 2], 2) and not fl.is_dyck([0, 1, 2, 3], 2) and not fl.is_dyck([2, 0], 2)


@pytest.mark.parametrize("marked, length", [(True, 15), (False, 14)])
def test_palindromes_are_reversals_and_negatives_keep_counts(marked, length):
    options = fl.PalindromeOptions(length=length, marked=marked)
    tokens, labels = fl.Palindromes.generate(options, 300, SEED)
    assert labels.sum() == 150
    for string, label in zip(_symbols(tokens, options), labels, strict=True):
        half = length // 2
        assert int(string == string[::-1]) == label
        if label:
            assert string[:half] == string[::-1][:half] and (string[half] == 2) == marked
        counts = np.bincount(string, minlength=3)
        assert counts[2] == int(marked) and counts[0] % 2 == 0 and counts[1] % 2 == 0


def test_bfvp_labels_are_the_formula_value():
    options = fl.BfvpOptions(length=15)
    tokens, labels = fl.Bfvp.generate(options, 300, SEED)
    strings = _symbols(tokens, options)
    assert labels.sum() == 150
    assert [int(_bfvp_right_to_left(s)) for s in strings] == labels.tolist()
    for string in strings:
        counts = np.bincount(string, minlength=5)
        assert counts[fl.FALSE] + counts[fl.TRUE] == counts[fl.AND] + counts[fl.OR] + 1
    # Some negatives are well-formed formulas whose value is 0, not just broken syntax.
    false_formulas = [s for s, y in zip(strings, labels, strict=True) if not y and fl.evaluate_prefix(s)[1] == 15]
    assert len(false_formulas) > 10
    assert fl.evaluate_prefix([fl.AND, fl.NOT, fl.FALSE, fl.OR, fl.FALSE, fl.TRUE]) == (1, 6)
    assert not fl.is_true_formula([fl.AND, fl.TRUE]) and not fl.is_true_formula([fl.TRUE, fl.TRUE])


def _parse_composition(row: np.ndarray, options: fc.CompositionOptions) -> tuple[list[dict[int, int]], int, int]:
    n, levels = options.num_values, options.num_functions
    width = n * (2 if options.encoding == "pairs" else 1) + 1
    tables = []
    for level in range(levels):
        segment = row[level * width : (level + 1) * width]
        assert segment[0] == 1 + n + level
        body = segment[1:] - 1
        pairs = zip(body[0::2], body[1::2], strict=True) if options.encoding == "pairs" else enumerate(body)
        tables.append({int(i): int(v) for i, v in pairs})
        assert sorted(tables[-1]) == list(range(n))
    assert row[levels * width] == fc.query_marker(options)
    return tables, int(row[-2] - 1), int(row[-1] - 1)


@pytest.mark.parametrize("encoding, permutations", [("table", False), ("pairs", True)])
def test_function_composition_answers_by_direct_evaluation(encoding, permutations):
    options = fc.CompositionOptions(num_values=6, num_functions=3, encoding=encoding, permutations=permutations)
    tokens, labels = fc.Composition.generate(options, 200, SEED)
    assert tokens.shape == (200, fc.Composition.length(options))
    assert tokens.max() < fc.Composition.vocab_size(options) and tokens.min() >= 1
    for row, label in zip(tokens, labels, strict=True):
        tables, value, answer = _parse_composition(row, options)
        for table in tables:
            value = table[value]
            assert not permutations or sorted(table.values()) == list(range(6))
        assert value == answer == label
    assert np.flatnonzero(fc.Composition.loss_weights(options)).tolist() == [tokens.shape[1] - 1]
    if encoding == "pairs":
        # Shuffled argument order: not always 0, 1, ..., n - 1.
        assert (tokens[:, 1:13:2] - 1 != np.arange(6)).any()


def _closed_form(function: str, bits: np.ndarray) -> np.ndarray:
    return {"parity": bits.sum(1) % 2, "and": bits.prod(1), "or": 1 - (1 - bits).prod(1)}[function]


@pytest.mark.parametrize("function", ["parity", "and", "or"])
@pytest.mark.parametrize("sparsity", [3, 4, 8])
def test_boolean_chain_tokens_follow_the_tree(function, sparsity):
    options = sb.SparseBooleanOptions(num_bits=12, sparsity=sparsity, function=function)
    tokens, labels = sb.SparseBoolean.generate(options, 2000, SEED)
    bits, d, support = tokens - 1, 12, sb.support(options)
    assert tokens.shape == (2000, 12 + sparsity - 1) and set(np.unique(tokens)) <= {1, 2}
    gate = {"parity": np.bitwise_xor, "and": np.bitwise_and, "or": np.bitwise_or}[function]
    np.testing.assert_array_equal(bits[:, -1], _closed_form(function, bits[:, support]))
    np.testing.assert_array_equal(labels, bits[:, -1])
    if sparsity == 4:
        z1, z2 = gate(bits[:, support[0]], bits[:, support[1]]), gate(bits[:, support[2]], bits[:, support[3]])
        np.testing.assert_array_equal(bits[:, d:], np.stack([z1, z2, gate(z1, z2)], axis=1))
    if sparsity == 3:
        z1 = gate(bits[:, support[0]], bits[:, support[1]])
        np.testing.assert_array_equal(bits[:, d:], np.stack([z1, gate(z1, bits[:, support[2]])], axis=1))
    for j, (a, b) in enumerate(sb.chain_parents(support, d)):
        assert a < d + j and b < d + j
        np.testing.assert_array_equal(bits[:, d + j], gate(bits[:, a], bits[:, b]))
    # The default ρ balances f(x) (2000 draws: standard error ~0.011).
    assert abs(labels.mean() - 0.5) < 0.05
    assert np.flatnonzero(sb.SparseBoolean.loss_weights(options)).tolist() == list(range(d, d + sparsity - 1))


def test_chain_levels():
    np.testing.assert_array_equal(sb.chain_levels(8), [1, 1, 1, 1, 2, 2, 3])
    np.testing.assert_array_equal(sb.chain_levels(3), [1, 2])


@pytest.mark.parametrize("task, options", [
    (fl.Dyck, fl.DyckOptions(length=8)), (fl.Palindromes, fl.PalindromeOptions(length=9)),
    (fl.Bfvp, fl.BfvpOptions(length=9)), (fc.Composition, fc.CompositionOptions(num_values=4)),
    (sb.SparseBoolean, sb.SparseBooleanOptions(num_bits=8)),
])
def test_seeds_reproduce(task, options):
    first = task.generate(options, 64, np.random.SeedSequence([3, 0]))
    again = task.generate(options, 64, np.random.SeedSequence([3, 0]))
    other = task.generate(options, 64, np.random.SeedSequence([3, 1]))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


@pytest.mark.parametrize("name, options, message", [
    ("dyck", (("length", 15),), "'length' must be even"),
    ("dyck", (("eval_length", 13),), "'eval_length' must be even"),
    ("dyck", (("num_types", 0),), "'num_types' must be an integer in \\[1, 16\\]"),
    ("dyck", (("lenght", 8),), "unknown dyck dataset option 'lenght'; valid options: \\['eval_examples'"),
    ("palindromes", (("length", 10),), "'length' must be odd"),
    ("bfvp", (("padding", -1),), "'padding' must be an integer in"),
    ("function_composition", (("num_values", 1),), "'num_values' must be an integer in \\[2, 4096\\]"),
    ("function_composition", (("encoding", "list"),), "option 'encoding' must be one of \\['table', 'pairs'\\]"),
    ("sparse_boolean", (("num_bits", 4), ("sparsity", 5)), "'sparsity' must be an integer in \\[2, 4\\]"),
    ("sparse_boolean", (("bit_probability", 1.5),), "'bit_probability' must be None or lie in \\(0, 1\\)"),
    ("sparse_boolean", (("train_examples", 0),), "'train_examples' must be an integer >= 1"),
    ("topics", (("length", 8),), "dataset 'topics' takes no task options"),
])
def test_bad_options_name_the_field(name, options, message):
    with pytest.raises(ValueError, match="data.task_options") as error:
        DataConfig(name=name, task_options=options)
    assert error.match(message)


def test_options_from_the_command_line():
    data = apply_overrides(DataConfig(name="dyck"), ["task_options=(('length', 10), ('num_types', 3))"])
    assert data.task_options == (("length", 10), ("num_types", 3))
    assert data_lib.vocab_size(data) == fl.FIRST_SYMBOL + 6


def _dyck_rows_match_labels(batch: dict[str, np.ndarray], length: int) -> None:
    inputs = batch["inputs"]
    assert (inputs[:, length : length + 2] == fl.PAD).all() and (inputs[:, length + 2] == fl.CLS).all()
    strings = (inputs[:, :length] - fl.FIRST_SYMBOL).tolist()
    assert [int(_dyck_by_reduction(s, 2)) for s in strings] == batch["labels"].tolist()


def test_registered_tasks_build_offline_and_feed_the_pipeline(tmp_path):
    small = (("train_examples", 16), ("eval_examples", 6))
    dyck = DataConfig(name="dyck", data_dir=str(tmp_path),
                      task_options=(("length", 8), ("eval_length", 12), ("padding", 2), *small))
    batch = next(data_lib.make_train_iterator(dyck, batch_size=4, seq_len=15, seed=0, process_count=1))
    assert batch["labels"].shape == (4,) and (batch["segment_ids"][:, 11:] == 0).all()
    _dyck_rows_match_labels(batch, 8)
    # Length generalization: the validation split holds longer strings.
    evaluation = list(data_lib.make_eval_iterator(dyck, batch_size=3, seq_len=15, process_count=1))
    assert sum(len(b["labels"]) for b in evaluation) == 6 and (evaluation[0]["segment_ids"] == 1).all()
    for batch in evaluation:
        _dyck_rows_match_labels(batch, 12)
    assert data_lib.vocab_size(dyck) == 9
    with pytest.raises(ValueError, match="seq_len must be >= 15"):
        data_lib.make_train_iterator(dyck, batch_size=4, seq_len=14, seed=0, process_count=1)
    chain = DataConfig(name="sparse_boolean", data_dir=str(tmp_path), task_options=(("num_bits", 6), *small))
    batch = next(data_lib.make_train_iterator(chain, batch_size=2, seq_len=18, seed=0, process_count=1))
    # Packed whole: two examples of 9 tokens (8 pairs) per row, loss on the 3 chain targets of each.
    assert "labels" not in batch and batch["weights"].sum(1).tolist() == [6.0, 6.0]
    np.testing.assert_array_equal(batch["segment_ids"][:, :16], np.repeat([[1] * 8 + [2] * 8], 2, axis=0))
