"""The hard_kv, pbs_attn and fp8_rank_aware experiments: the checks that reject bad options before anything is
written, the PBS measurement's exactness at τ = 1, and the needle task on the byte corpus. Their SMOKE runs are
the experiment contract's (tests/repro/test_experiments.py)."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.repro import fp8_rank_aware, hard_kv, pbs_attn
from icml26zoo.repro.common import Budget
from icml26zoo.repro.needle import corpus_bytes, needle_task

TINY = Budget(steps=1, batch_size=1, seq_len=32)


@pytest.mark.parametrize(("module", "kwargs", "message"), [
    (hard_kv, {"budgets": (0.5, 1.5)}, r"budgets\[i\] must be a number in \(0, 1\], got 1.5"),
    (hard_kv, {"budgets": (0.5, 0.5)}, r"budgets must be distinct numbers in \(0, 1\]"),
    (hard_kv, {"top_p": 0.0}, r"top_p must be a number in \(0, 1\], got 0.0"),
    (hard_kv, {"sequences": 7}, r"sequences must be an integer in \[1, 6\], got 7"),
    (hard_kv, {"prompt": 32}, r"prompt must be an integer in \[1, 31\], got 32"),
    (hard_kv, {"budgets": (0.25,)}, r"budget = 0.25 gives 8 rows of max_len = 32: too few for interval 16"),
    (pbs_attn, {"block": 16, "segment": 24}, r"segment must be a multiple of block 16, got 24"),
    (pbs_attn, {"block": 16, "segment": 32, "lengths": (48,)},
     r"lengths\[i\] and budget.seq_len must be multiples of segment 32, got 48"),
    (pbs_attn, {"block": 16, "segment": 32, "taus": (0.0,)}, r"taus\[i\] must be a number in \(0, 1\], got 0.0"),
    (pbs_attn, {"block": 16, "segment": 32, "densities": ()}, r"densities must hold at least one value"),
    (fp8_rank_aware, {"headroom": 1.5}, r"headroom must be a number in \(0, 1\], got 1.5"),
    (fp8_rank_aware, {"eval_rows": 0}, r"eval_rows must be an integer >= 1, got 0"),
    (fp8_rank_aware, {"sweep_trials": 0}, r"sweep_trials must be an integer >= 1, got 0"),
])
def test_bad_options_raise_before_anything_is_written(module, kwargs, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        module.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


def test_pbs_at_tau_one_is_dense_attention_and_the_permutation_lists_fewer_blocks():
    rows = pbs_attn.density_table(128, 16, 32, (0.5, 1.0))
    by = {(r["tau"], r["permute"]): r for r in rows}
    for permute in (True, False):
        assert by[(1.0, permute)]["error"] < 1e-5
        assert by[(0.5, permute)]["density"] < by[(1.0, permute)]["density"]
    q, k, v = pbs_attn.structured_qkv(0, 64, batch=2)
    assert q.shape == (2, 64, pbs_attn.HEADS, pbs_attn.DIM) and k.shape == v.shape == (2, 64, pbs_attn.KV_HEADS,
                                                                                      pbs_attn.DIM)


def test_the_needle_task_reads_the_byte_corpus():
    text = corpus_bytes()
    assert text.dtype == np.uint8 and text.size == 1 << 21
    task = needle_task(512, seed=3)
    assert task.q.shape == (1, 512, 2, 64) and list(task.questions) == list(range(504, 512))
    np.testing.assert_array_equal(needle_task(512, seed=3).answers, task.answers)


def test_fp8_rank_sweep_reports_tightness_and_overflow_rates_across_ranks():
    """The rank sweep's rank-aware bound is tighter than the rank-agnostic one below full rank (equal at r = d),
    no draw exceeds it or overflows at its scale (δ = 1e-6), nor at the spectral scale, which is always safe."""
    rows = fp8_rank_aware.rank_sweep(trials=30, dims=(64,), ranks=(1, 16, 64))
    assert [r["rank"] for r in rows] == [1, 16, 64] and all(r["draws"] == 30 for r in rows)
    ratios = [r["rank_aware_over_agnostic"] for r in rows]
    assert ratios[0] < ratios[1] < ratios[2] == pytest.approx(1.0)
    for row in rows:
        assert row["max_over_rank_aware_max"] < 1.0 and row["overflow_rate_rank_aware"] == 0.0
        assert row["overflow_rate_spectral"] == 0.0 and 0.0 < row["max_over_rank_aware_median"]
