"""`pcfg_lm`: next-token cross-entropy on PCFG rows, with the KL from the grammar's exact next-token
distribution to the model's as summed metrics (the paper's metric: mean KL(P_grammar(· | w_1..w_t) ‖ P_model)).

The loss is the `lm` objective's (weighted next-token cross-entropy on the sampled targets); what this
objective adds is the exact distribution. The batch holds only tokens, so the exact distribution
p [B, T, V] is computed from them on the host (`jax.pure_callback` into `pcfg.rows.ExactDistributions`:
float64 dynamic programming, cached per sentence): each row segment that starts with <bos> gets, at
position t, P(· | the segment's words up to t) over the token layout of `pcfg.rows`; other positions
(padding, a segment cut from a longer sentence) have mask m = 0. Metrics (sums over the batch):

  kl_sum         Σ_t w_t m_t KL(p_t ‖ q_t),  q_t = softmax(logits_t) over the model's whole vocabulary
  kl_weight      Σ_t w_t m_t  (mean KL = kl_sum / kl_weight)
  entropy_sum    Σ_t w_t m_t H(p_t), the grammar's entropy (cross-entropy to p = entropy + KL)
  entropy_weight Σ_t w_t m_t again, so the trainer's eval reports eval/kl and eval/entropy as means

The grammar is the objective's options (`options_class = RandomGrammarSpec`, set through
`objective_options`; default: the `pcfg` dataset's default grammar). It must be the dataset's grammar:
give `objective_options` the same num_nonterminals, num_terminals, binary_rules, terminal_rules,
binary_probability, concentration and grammar_seed pairs as `data.task_options`
(`train.data.pcfg.PCFGOptions.grammar_spec()`). A sentence that is impossible under the objective's
grammar (data from another grammar) has no finite KL: it shows as NaN.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.losses.batch_fields import TOKEN_FIELDS, require_batch_fields
from icml26zoo.losses.cross_entropy import weighted_cross_entropy, weighted_mean
from icml26zoo.losses.objectives import Batch, Objective
from icml26zoo.pcfg.grammar import RandomGrammarSpec
from icml26zoo.pcfg.rows import ExactDistributions
from icml26zoo.registry import register_objective


def kl_sums(logits: jax.Array, exact: jax.Array, weights: jax.Array) -> dict[str, jax.Array]:
    """The summed metrics (module docstring) for logits [B, T, V'], exact p [B, T, V] (V <= V'), weights [B, T]."""
    log_q = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)[..., : exact.shape[-1]]
    # 0 · log 0 = 0: positions and words the grammar rules out contribute nothing.
    entropy = -jnp.sum(jax.scipy.special.xlogy(exact, exact), axis=-1)
    cross = -jnp.sum(jnp.where(exact > 0, exact * log_q, 0.0), axis=-1)
    weight = jnp.sum(weights)
    return {"kl_sum": jnp.sum(weights * (cross - entropy)), "kl_weight": weight,
            "entropy_sum": jnp.sum(weights * entropy), "entropy_weight": weight}


@functools.lru_cache(maxsize=8)
def exact_distributions(spec: RandomGrammarSpec) -> ExactDistributions:
    """The host-side exact distributions of the grammar `spec` defines (one cache per grammar)."""
    return ExactDistributions(spec.grammar())


@register_objective("pcfg_lm")
def pcfg_lm_objective(model: nnx.Module, batch: Batch, rng: jax.Array,
                      options: RandomGrammarSpec | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Weighted next-token cross-entropy (the loss) plus kl_sum / kl_weight / entropy_sum (module docstring).

    `options` is the grammar (default `RandomGrammarSpec()`, the `pcfg` dataset's default grammar).
    """
    del rng  # Deterministic.
    require_batch_fields("pcfg_lm", batch, TOKEN_FIELDS, dataset="pcfg")
    exact_rows = exact_distributions(RandomGrammarSpec() if options is None else options)
    vocab = exact_rows.vocab_size
    inputs = batch["inputs"]
    logits = model(inputs, segment_ids=batch["segment_ids"], positions=batch["positions"])
    if logits.shape[-1] < vocab:
        raise ValueError(f"objective 'pcfg_lm' needs model.vocab_size >= {vocab} (the grammar's vocabulary), "
                         f"got logits with {logits.shape[-1]} columns")

    def host(inputs, segment_ids):
        return exact_rows.rows(np.asarray(inputs), np.asarray(segment_ids))

    shapes = (jax.ShapeDtypeStruct((*inputs.shape, vocab), jnp.float32),
              jax.ShapeDtypeStruct(inputs.shape, jnp.float32))
    exact, mask = jax.pure_callback(host, shapes, inputs, batch["segment_ids"], vmap_method="sequential")
    sums = weighted_cross_entropy(logits, batch["targets"], batch["weights"])
    metrics = {"loss_sum": sums.loss_sum, "weight": sums.weight, "correct": sums.correct}
    metrics.update(kl_sums(jax.lax.stop_gradient(logits), exact, batch["weights"] * mask))
    return weighted_mean(sums), metrics


# The grammar is the objective's typed options (`objective_options`, the same fields as the dataset's).
pcfg_lm_objective.options_class = RandomGrammarSpec


def make_pcfg_objective(spec: RandomGrammarSpec) -> Objective:
    """`pcfg_lm` for the grammar `spec` defines."""
    return functools.partial(pcfg_lm_objective, options=spec)
