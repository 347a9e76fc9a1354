"""Exact PCFG quantities (zoo/pcfg) against references written here: explicit enumeration of parse trees and
of strings, Monte Carlo samples of the grammar, and closed-form identities (docs/papers/pcfg_probing.md)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from icml26zoo.pcfg import exact
from icml26zoo.pcfg.grammar import Grammar, RandomGrammarSpec, sample_sentences


def _dense_grammar() -> Grammar:
    """3 nonterminals, 2 terminals, every rule present (highly ambiguous); binary mass 0.3 per nonterminal."""
    rng = np.random.default_rng(5)
    binary = rng.dirichlet(np.ones(9), size=3).reshape(3, 3, 3) * 0.3
    emission = rng.dirichlet(np.ones(2), size=3) * 0.7
    return Grammar(binary, emission, start=0)


TINY = _dense_grammar()
RANDOM = RandomGrammarSpec(num_nonterminals=6, num_terminals=5, binary_rules=3, terminal_rules=3).grammar()


def _bracketings(i: int, j: int):
    """Every binary tree over words i..j as nested (i, j, left, right) tuples; a leaf is (i, i)."""
    if i == j:
        yield (i, i)
        return
    for k in range(i, j):
        for left in _bracketings(i, k):
            for right in _bracketings(k + 1, j):
                yield (i, j, left, right)


def _nodes(tree) -> list:
    return [tree] if len(tree) == 2 else [tree, *_nodes(tree[2]), *_nodes(tree[3])]


def _parses(grammar: Grammar, words: list[int]):
    """(probability, [(span, label)]) of every labelled parse tree of `words` rooted at the start symbol."""
    for tree in _bracketings(0, len(words) - 1):
        nodes = _nodes(tree)
        index = {id(node): position for position, node in enumerate(nodes)}
        for labels in itertools.product(range(grammar.num_nonterminals), repeat=len(nodes) - 1):
            labels = (grammar.start, *labels)
            probability = 1.0
            for node, label in zip(nodes, labels, strict=True):
                if len(node) == 2:
                    probability *= grammar.emission[label, words[node[0]]]
                else:
                    left, right = labels[index[id(node[2])]], labels[index[id(node[3])]]
                    probability *= grammar.binary[label, left, right]
            yield probability, [(node[:2], label) for node, label in zip(nodes, labels, strict=True)]


@pytest.mark.parametrize("words", [[1], [0, 1], [1, 1, 0], [0, 1, 1, 0]])
def test_inside_and_outside_equal_sums_over_parse_trees(words):
    parses = list(_parses(TINY, words))
    total = sum(p for p, _ in parses)
    np.testing.assert_allclose(exact.sentence_probability(TINY, words), total, rtol=1e-12)
    marginals = np.zeros((len(words), len(words), 3))
    for probability, labelled in parses:
        for (i, j), label in labelled:
            marginals[i, j, label] += probability / total
    mu = exact.span_marginals(TINY, words)
    np.testing.assert_allclose(mu, marginals, atol=1e-12)
    # Expected node count of a binary tree with n leaves: 2n - 1 (Σ over spans and labels of α β / Z).
    np.testing.assert_allclose(mu.sum(), 2 * len(words) - 1, rtol=1e-12)


def test_prefix_probability_is_the_mass_of_all_completions():
    prefix, longest = [0, 1], 9
    lengths = exact.length_distribution(TINY, longest)
    completions = sum(exact.sentence_probability(TINY, prefix + list(rest))
                      for extra in range(longest - len(prefix) + 1)
                      for rest in itertools.product(range(2), repeat=extra))
    rho = exact.prefix_probabilities(TINY, prefix)[-1]
    tail = 1.0 - lengths.sum()
    # The enumeration misses only completions longer than `longest`, whose total mass is at most the tail.
    assert 0.0 <= rho - completions <= tail + 1e-12 and tail < 0.05
    for n in (1, 2, 3):
        by_strings = sum(exact.sentence_probability(TINY, list(w)) for w in itertools.product(range(2), repeat=n))
        np.testing.assert_allclose(lengths[n], by_strings, rtol=1e-12)


@pytest.mark.parametrize("grammar", [TINY, RANDOM], ids=["dense", "random"])
def test_next_token_rows_sum_to_one_and_follow_the_chain_rule(grammar):
    for sample in sample_sentences(grammar, 4, 11, 20):
        words = sample.words
        rows = exact.next_token_distributions(grammar, words)
        np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-10)
        # P(prefix · a) = P(prefix) p(a | prefix), with P(prefix) from the Jelinek-Lafferty ρ recursion.
        prefixes = exact.prefix_probabilities(grammar, words)
        np.testing.assert_allclose(prefixes[1:], prefixes[:-1] * rows[np.arange(words.size), words], rtol=1e-10)
        np.testing.assert_allclose(rows[-1, -1] * prefixes[-1], exact.sentence_probability(grammar, words),
                                   rtol=1e-10)
    assert exact.next_token_distributions(grammar, [0])[0, -1] == 0.0


def test_sampled_next_tokens_match_the_exact_distribution():
    samples = sample_sentences(TINY, 6000, 3, 64)
    counts = {(): np.zeros(3), (0,): np.zeros(3), (1, 1): np.zeros(3)}
    for sample in samples:
        words = sample.words.tolist() + [2]  # 2 = EOS
        for prefix, table in counts.items():
            if len(words) > len(prefix) and tuple(words[: len(prefix)]) == prefix:
                table[words[len(prefix)]] += 1
    lengths = np.bincount([s.words.size for s in samples], minlength=9)[:9] / len(samples)
    _chi_square_passes(lengths[1:] * len(samples), exact.length_distribution(TINY, 8)[1:])
    for prefix, table in counts.items():
        expected = exact.next_token_distributions(TINY, list(prefix) or [0])[len(prefix)]
        _chi_square_passes(table, expected)


def _chi_square_passes(observed: np.ndarray, probabilities: np.ndarray) -> None:
    keep = probabilities > 0
    total = observed.sum()
    expected = probabilities[keep] / probabilities[keep].sum() * total
    statistic = np.sum((observed[keep] - expected) ** 2 / expected)
    assert observed[~keep].sum() == 0
    assert statistic < stats.chi2.ppf(0.999, df=keep.sum() - 1), (observed, expected)


def test_probe_targets_closed_forms():
    words = sample_sentences(RANDOM, 1, 2, 20)[0].words
    targets = exact.probe_targets(RANDOM, words)
    np.testing.assert_allclose(targets["next_token"], exact.next_token_distributions(RANDOM, words))
    np.testing.assert_allclose(targets["open_state"].sum(axis=1), 1.0)
    # The start symbol never appears on a right-hand side: S spans [0, t-1] exactly when the sentence ends.
    np.testing.assert_allclose(targets["completed"][:, 0], targets["next_token"][:, -1], atol=1e-12)
    assert np.all(targets["completed"] >= 0) and targets["completed"][:2].sum() == 0


def _two_symbol_grammar(binary_mass: float, emission_each: float) -> tuple[np.ndarray, np.ndarray]:
    binary = np.zeros((2, 2, 2))
    binary[:, 1, 1] = binary_mass
    return binary, np.full((2, 2), emission_each)


@pytest.mark.parametrize("binary, emission, message", [
    # Two children, each nonterminal 1 with probability 0.6: 1.2 expected offspring per node.
    (*_two_symbol_grammar(0.6, 0.2), "grammar.binary: the grammar does not terminate.*spectral radius 1.2 >= 1"),
    (*_two_symbol_grammar(0.3, 0.1), "grammar.binary and grammar.emission: the rules of each nonterminal must sum"),
    (_two_symbol_grammar(0.3, 0.35)[0][:1], _two_symbol_grammar(0.3, 0.35)[1], "grammar.binary must have shape"),
    (-_two_symbol_grammar(0.3, 0.35)[0], _two_symbol_grammar(0.3, 0.35)[1], "grammar.binary must hold finite non-neg"),
])
def test_bad_grammars_name_the_field(binary, emission, message):
    Grammar(*_two_symbol_grammar(0.3, 0.35))
    with pytest.raises(ValueError, match=message):
        Grammar(binary, emission)


def test_bad_random_grammars_and_sentences_name_the_field():
    with pytest.raises(ValueError, match="binary_probability = 0.5 gives an impossible grammar.*spectral radius 1"):
        RandomGrammarSpec(binary_probability=0.5)
    with pytest.raises(ValueError, match="num_nonterminals must be an integer >= 2, got 1"):
        RandomGrammarSpec(num_nonterminals=1)
    with pytest.raises(ValueError, match="sentence must be a non-empty sequence of terminal indices in \\[0, 5\\)"):
        exact.inside(RANDOM, [0, 5])
