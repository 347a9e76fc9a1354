"""Reproduction: the adaptive (global, coarse-to-fine) protein tokenizer, with and without nested dropout.

Paper: Dilip, Varshney, Van Valen, "Adaptive Protein Tokenization" (ICML 2026, arXiv 2602.06418); see
docs/papers/protein_tokenizer.md. The claim tested: training with nested dropout orders the tokens coarse to fine,
so a structure decoded from the first k tokens is already close and gets closer as k grows, while the same
tokenizer trained on every token (the simple baseline, same budget) degrades when decoded from a short prefix.
Both presets (`protein_tokenizer`, `protein_tokenizer_baseline`) are trained by the shared trainer on synthetic Cα
chains (zoo_backbones), once per seed; each trained cell then decodes the same fresh, randomly rotated chains
from the first k tokens for every k of `prefixes` and reports the Cα RMSD after optimal alignment (Å) and the
FSQ codebook usage.

    python -m icml26zoo.repro protein_tokenizer --out runs/repro/protein_tokenizer     # FULL: 3 seeds
    python -m icml26zoo.repro protein_tokenizer --quick

Budget fields: steps, batch_size and seeds of every cell; seq_len is the longest chain (chains have seq_len // 2
to seq_len residues).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax

from icml26zoo.repro.common import Budget, Experiment, Results, check_names, parameter_count
from icml26zoo.repro.protein_tokenizer_parts import (
    ROLES,
    cell_base,
    cell_name,
    evaluate_cell,
    prefix_figure,
    role_rows,
)
from icml26zoo.repro.registry import register_experiment
from icml26zoo.validation import check_bool, check_int

__all__ = ["FULL", "PREFIXES", "QUICK", "QUICK_ARGS", "SMOKE", "SMOKE_ARGS", "run"]

# 31 is the longest prefix training draws: the paper's cut-off k ~ UniformInt[1, min(L, n_tokens)) excludes 32.
PREFIXES = (1, 2, 4, 8, 16, 31)
FULL = Budget(steps=400, batch_size=32, seq_len=64, seeds=(0, 1, 2))
QUICK = Budget(steps=200, batch_size=32, seq_len=48, seeds=(0,))
QUICK_ARGS = {"eval_chains": 64}
# One role (the baseline runs the same code), 2 steps of the tiny model (8 tokens), 4 chains: every code path.
SMOKE = Budget(steps=2, batch_size=4, seq_len=16, seeds=(0,))
SMOKE_ARGS = {"roles": ("nested",), "tiny": True, "prefixes": (1, 2, 7), "eval_chains": 4}


@register_experiment("protein_tokenizer", smoke=SMOKE, quick=QUICK, full=FULL, smoke_args=SMOKE_ARGS,
                     quick_args=QUICK_ARGS, page="docs/papers/protein_tokenizer.md")
def run(run_dir: str | os.PathLike, *, budget: Budget = FULL, roles: Sequence[str] = ROLES,
        prefixes: Sequence[int] = PREFIXES, eval_chains: int = 128, tiny: bool = False,
        resume: bool = False) -> Results:
    """Trains both tokenizers per seed, decodes fresh chains from each prefix, writes results.md/json and
    prefixes.png.

    Args:
      run_dir: the experiment's directory (cells, the generated chains, results).
      budget: steps, batch size, longest chain (seq_len) and seeds of every cell.
      roles: which of "nested" (protein_tokenizer) and "baseline" (protein_tokenizer_baseline) to train.
      prefixes: the numbers of tokens decoded, increasing integers in [1, the model's n_tokens].
      eval_chains: fresh chains every cell decodes (>= 1).
      tiny: shrink the model and the data (the smoke run; a check of the pipeline, not a result).
      resume: require run_dir to exist; finished cells and measurements are reused either way.
    """
    roles = check_names("roles", roles, ROLES)
    prefixes = _check_prefixes(prefixes)
    check_int("eval_chains", eval_chains)
    check_bool("tiny", tiny)
    check_int("budget.seq_len (the longest chain)", budget.seq_len, minimum=8)
    experiment = Experiment(run_dir, budget=budget, resume=resume)
    measured, params = {}, {}
    for role in roles:
        base = cell_base(role, experiment, tiny=tiny)
        n_tokens = dict(base.model.model_options)["n_tokens"]
        if prefixes[-1] > min(n_tokens, budget.seq_len):
            raise ValueError(f"prefixes must be at most the model's n_tokens ({n_tokens}) and the longest chain "
                             f"({budget.seq_len}), got {list(prefixes)}")
        params[role] = parameter_count(base.model)
        measured[role] = []
        for seed in budget.seeds:
            config = experiment.cell_config(base, seed=seed, checkpoints=1)
            experiment.train_cell(cell_name(role, seed), config, devices=jax.devices()[:1], final_eval=False)
            measured[role].append(evaluate_cell(experiment, role, seed, base, prefixes=prefixes, chains=eval_chains))
    rows, columns = role_rows(measured, prefixes)
    notes = _notes(budget, params, eval_chains, tiny)
    return experiment.write(rows, columns=columns, notes=notes,
                            figures={"prefixes": prefix_figure(rows, len(budget.seeds))},
                            title="Protein tokenizer: Cα RMSD against the number of tokens decoded",
                            extra={"prefixes": list(prefixes), "params": params})


def _check_prefixes(prefixes: Sequence[int]) -> tuple[int, ...]:
    prefixes = tuple(prefixes)
    if not prefixes:
        raise ValueError("prefixes must name at least one number of tokens, got none")
    for value in prefixes:
        check_int("prefixes[i]", value)
    if list(prefixes) != sorted(set(prefixes)):
        raise ValueError(f"prefixes must be strictly increasing, got {list(prefixes)}")
    return prefixes


def _notes(budget: Budget, params: dict[str, int], eval_chains: int, tiny: bool) -> list[str]:
    size = ("tiny=True: one block of width 16 each side, 8 tokens, a few dozen chains; a check of the pipeline, "
            "not a result" if tiny else "the presets' sizes")
    models = ", ".join(f"{role} {count:,} parameters" for role, count in params.items())
    return [f"Presets protein_tokenizer (nested dropout) and protein_tokenizer_baseline (every token in training); "
            f"{models}; {size}. Trained by the shared trainer on zoo_backbones chains of {budget.seq_len // 2}-"
            f"{budget.seq_len} residues ({budget.steps} steps of {budget.batch_size} chains, seeds "
            f"{list(budget.seeds)}).",
            f"rmsd_A: Cα RMSD (Å) after optimal rigid alignment of the chain decoded from the first `tokens` tokens "
            f"(the rest zeroed), averaged over {eval_chains} fresh, randomly rotated chains; mean over seeds, "
            "*_spread = max - min over seeds (- with one seed), *_per_seed: the values.",
            "used_codes / codebook / perplexity: FSQ codes used by the tokens of those chains, the codebook size, "
            "and exp(entropy) of the code usage (means over seeds)."]
