"""Exact quantities of a CNF grammar on one sentence: inside, outside, span marginals, prefix probabilities,
the grammar-induced next-token distribution and the per-token probe targets (docs/papers/pcfg_probing.md).

Indices are 0-based: a sentence w_0 .. w_{n-1}; span [i, j] includes both ends; "prefix length t" means
w_0 .. w_{t-1} has been seen. All arrays are float64 numpy.

Inside:  β[i, j, A] = P(A ⇒* w_i .. w_j).
Outside: α[i, j, A] = P(S ⇒* w_0..w_{i-1} A w_{j+1}..w_{n-1}); span marginal μ = α β / β[0, n-1, S].
Prefix probability (Jelinek & Lafferty 1991), by the recursion with R_L = (I - P_L)^{-1}:
    ρ[t, t, A] = Σ_D R_L[A, D] P(D -> w_t)
    ρ[i, t, A] = Σ_D R_L[A, D] Σ_{D->BC} P(D -> B C) Σ_{k=i}^{t-1} β[i, k, B] ρ[k+1, t, C]
so P(w_0..w_t ·) = ρ[0, t, S], the total probability of the strings starting with that prefix.

The next-token distributions of all prefixes come from one left-to-right pass (the same recursion with
the sums reordered): g[i] [N] is the expected number of times each nonterminal starts at position i on the
left spine of the tree, given the prefix w_0..w_{i-1} is complete to its left,

    g[0] = e_S R_L,   g[j] = Σ_{i<j} Σ_{D,B} g[i][D] P(D -> B C) β[i, j-1, B]  (as a row over C), then · R_L

and the score of each continuation of prefix length t is g[t] · P(· -> a) for a word a, β[0, t-1, S] for
the end of the sentence (EOS). The scores sum to the prefix probability (the grammar terminates), so
P(a | w_0..w_{t-1}) = score_t[a] / ρ[0, t-1, S] (tests check both identities against that recursion).

Numerics: every computation runs on scaled values, each word's probability multiplied by Σ (the number
of terminals), so a quantity over a span of m words carries the factor Σ^m and stays near 1 instead of
underflowing; public functions return unscaled values or ratios.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from icml26zoo.pcfg.grammar import Grammar


def _words(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    words = np.asarray(sentence, np.int64).reshape(-1)
    if words.size == 0 or np.any(words < 0) or np.any(words >= grammar.num_terminals):
        raise ValueError(f"sentence must be a non-empty sequence of terminal indices in "
                         f"[0, {grammar.num_terminals}), got {words.tolist()}")
    return words


def _scale(grammar: Grammar) -> float:
    return float(grammar.num_terminals)


def _inside_scaled(grammar: Grammar, words: np.ndarray) -> np.ndarray:
    """β̃[i, j, A] = Σ^{j-i+1} β[i, j, A], [n, n, N] (zero for j < i)."""
    n, big_n = words.size, grammar.num_nonterminals
    beta = np.zeros((n, n, big_n))
    beta[np.arange(n), np.arange(n)] = _scale(grammar) * grammar.emission[:, words].T
    for length in range(2, n + 1):
        starts = np.arange(n - length + 1)
        splits = np.arange(length - 1)
        # left[i, k] = β̃[i, i+k], right[i, k] = β̃[i+k+1, i+length-1] for every start i and split k.
        left = beta[starts[:, None], starts[:, None] + splits[None, :]]
        right = beta[starts[:, None] + splits[None, :] + 1, (starts + length - 1)[:, None]]
        pair = np.einsum("ikb,ikc->ibc", left, right)
        beta[starts, starts + length - 1] = np.einsum("abc,ibc->ia", grammar.binary, pair)
    return beta


def inside(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    """β [n, n, N]: β[i, j, A] = P(A ⇒* w_i .. w_j); β[0, n-1, start] is the sentence probability."""
    words = _words(grammar, sentence)
    beta = _inside_scaled(grammar, words)
    lengths = np.arange(words.size)[None, :] - np.arange(words.size)[:, None] + 1
    return beta / _scale(grammar) ** np.maximum(lengths, 0)[:, :, None]


def sentence_probability(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> float:
    """P(w) = β[0, n-1, S], summed over all parses."""
    beta = inside(grammar, sentence)
    return float(beta[0, -1, grammar.start])


def outside(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    """α [n, n, N]: α[i, j, A] = P(S ⇒* w_0..w_{i-1} A w_{j+1}..w_{n-1}) (unscaled)."""
    beta = inside(grammar, sentence)
    n = beta.shape[0]
    alpha = np.zeros_like(beta)
    alpha[0, n - 1, grammar.start] = 1.0
    for length in range(n - 1, 0, -1):
        for i in range(n - length + 1):
            j = i + length - 1
            total = np.zeros(grammar.num_nonterminals)
            if j + 1 < n:
                # As a left child: parents [i, m] for m > j, right sibling [j+1, m].
                parents, siblings = alpha[i, j + 1 :], beta[j + 1, j + 1 :]
                total += np.einsum("ma,abc,mc->b", parents, grammar.binary, siblings)
            # As a right child: parents [m, j] for m < i, left sibling [m, i-1].
            parents, siblings = alpha[:i, j], beta[:i, i - 1]
            total += np.einsum("ma,abc,mb->c", parents, grammar.binary, siblings)
            alpha[i, j] = total
    return alpha


def span_marginals(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    """μ [n, n, N]: μ[i, j, A] = P(A spans [i, j] | w); Σ over spans and A is the expected node count 2n - 1."""
    beta = inside(grammar, sentence)
    alpha = outside(grammar, sentence)
    return alpha * beta / beta[0, -1, grammar.start]


def prefix_inside(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    """ρ [n, n, N] by the Jelinek-Lafferty recursion (unscaled): ρ[i, t, A] = P(A ⇒* w_i .. w_t v for some v)."""
    words = _words(grammar, sentence)
    n = words.size
    closure = grammar.left_closure()
    beta = _inside_scaled(grammar, words)
    rho = np.zeros_like(beta)
    for t in range(n):
        rho[t, t] = closure @ (_scale(grammar) * grammar.emission[:, words[t]])
        for i in range(t - 1, -1, -1):
            # Σ_k β̃[i, k, B] ρ̃[k+1, t, C] for k = i .. t-1, then through the rules and the left-corner closure.
            pair = np.einsum("kb,kc->bc", beta[i, i:t], rho[i + 1 : t + 1, t])
            rho[i, t] = closure @ np.einsum("dbc,bc->d", grammar.binary, pair)
    lengths = np.arange(n)[None, :] - np.arange(n)[:, None] + 1
    return rho / _scale(grammar) ** np.maximum(lengths, 0)[:, :, None]


def prefix_probabilities(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    """[n + 1]: entry t is P(w_0 .. w_{t-1} ·), the probability that a sentence starts with that prefix (1 at t = 0)."""
    rho = prefix_inside(grammar, sentence)
    return np.concatenate([[1.0], rho[0, :, grammar.start]])


def _spines_scaled(grammar: Grammar, words: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """g̃ [n + 1, N]: g[t] Σ^t, the left-spine expectations at each start position (module docstring)."""
    n, closure = words.size, grammar.left_closure()
    spine = np.zeros((n + 1, grammar.num_nonterminals))
    spine[0] = closure[grammar.start]
    for j in range(1, n + 1):
        # Constituents B over [i, j-1] completed, with D their parent on the spine started at i.
        right = np.einsum("id,dbc,ib->c", spine[:j], grammar.binary, beta[:j, j - 1])
        spine[j] = right @ closure
    return spine


def _continuation_scores(grammar: Grammar, words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores [n + 1, Σ + 1] scaled by Σ^(t+1): words then EOS, spines g̃, inside β̃)."""
    beta = _inside_scaled(grammar, words)
    spine = _spines_scaled(grammar, words, beta)
    scale = _scale(grammar)
    scores = np.zeros((words.size + 1, grammar.num_terminals + 1))
    scores[:, :-1] = spine @ (scale * grammar.emission)
    # EOS after prefix length t >= 1: the whole prefix is the sentence, β[0, t-1, S] (EOS counted as a word).
    scores[1:, -1] = scale * beta[0, :, grammar.start]
    return scores, spine, beta


def _prefix_masses(scores: np.ndarray, words: np.ndarray) -> np.ndarray:
    """[n + 1] Σ^t P(w_0..w_{t-1} ·): 1 at t = 0, then the score of the word actually seen after each prefix."""
    return np.concatenate([[1.0], scores[np.arange(words.size), words]])


def next_token_distributions(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> np.ndarray:
    """[n + 1, Σ + 1]: row t is P(next | w_0 .. w_{t-1}) over the Σ words then EOS (last column).

    Row 0 is the distribution of the first word (EOS impossible: sentences are non-empty); row n uses the
    whole sentence. Each row sums to 1 because the grammar terminates (not by normalization).
    """
    words = _words(grammar, sentence)
    scores, _, _ = _continuation_scores(grammar, words)
    scale = _scale(grammar)
    return scores / (scale * _prefix_masses(scores, words))[:, None]


def length_distribution(grammar: Grammar, max_length: int) -> np.ndarray:
    """[max_length + 1]: entry m is P(the sentence has m words) (entry 0 is 0); 1 - sum is P(m > max_length)."""
    big_n = grammar.num_nonterminals
    lengths = np.zeros((max_length + 1, big_n))
    if max_length >= 1:
        lengths[1] = grammar.emission.sum(axis=1)
    for m in range(2, max_length + 1):
        pair = np.einsum("kb,kc->bc", lengths[1:m], lengths[m - 1 : 0 : -1])
        lengths[m] = np.einsum("abc,bc->a", grammar.binary, pair)
    return lengths[:, grammar.start]


def probe_targets(grammar: Grammar, sentence: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
    """Per-prefix probe targets (a reconstruction: the paper's exact probe targets are not known).

    Row t (t = 0 .. n) describes the model state after reading prefix w_0 .. w_{t-1}:
      next_token [n + 1, Σ + 1]   exact next-token distribution (global summary);
      open_state [n + 1, N]       left-spine expectations g[t] normalized to sum 1: which nonterminals the
                                  grammar expects to open next (the stack-like state of the prefix parse);
      completed  [n + 1, N]       expected number of constituents A of >= 2 words ending at word t-1, given
                                  the prefix: Σ_i g[i][A] β[i, t-1, A] / P(prefix) (local, span-level);
      constituents_ending [n + 1] Σ over A of `completed`.
    The tree facts of the sampled parse (depth, boundary) are stored with the dataset rows.
    """
    words = _words(grammar, sentence)
    n, scale = words.size, _scale(grammar)
    scores, spine, beta = _continuation_scores(grammar, words)
    masses = _prefix_masses(scores, words)
    completed = np.zeros((n + 1, grammar.num_nonterminals))
    for t in range(2, n + 1):
        # Spans [i, t-1] with at least two words: i <= t-2.
        completed[t] = np.einsum("ia,ia->a", spine[: t - 1], beta[: t - 1, t - 1]) / masses[t]
    open_state = spine / spine.sum(axis=1, keepdims=True)
    return {
        "next_token": scores / (scale * masses)[:, None],
        "open_state": open_state,
        "completed": completed,
        "constituents_ending": completed.sum(axis=1),
    }
