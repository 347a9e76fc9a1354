"""Target-update reproduction: bad inputs, the cached cells (reused, refused with other settings), the exponent fit
on synthetic power laws, and the theory slopes it is compared with. The SMOKE experiment runs in the experiment
contract (tests/repro/test_experiments.py) and the notebook test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml26zoo.repro import target_update
from icml26zoo.repro import target_update_parts as parts
from icml26zoo.repro.common import Budget, Experiment

TINY = Budget(steps=20, batch_size=2, seq_len=1, seeds=(0,))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"schedules": ("polyak",)}, r"schedules: unknown name 'polyak'; expected one of \['constant', 'adaptive'\]"),
    ({"tabular_periods": (100, 0)}, r"tabular_periods: every period must be an integer >= 1, got 0"),
    ({"cartpole_periods": (-5,)}, r"cartpole_periods: every period must be an integer >= 1, got -5"),
    ({"cartpole_periods": ()}, r"cartpole_periods must be a non-empty tuple"),
    ({"adaptive_k0": 0}, r"adaptive_k0: every period must be an integer >= 1, got 0"),
    ({"tabular_gamma": 1.0}, r"tabular_gamma \(the discount γ\) must be a number in \(0, 1\), got 1.0"),
    ({"cartpole_gamma": -0.5}, r"cartpole_gamma \(the discount γ\) must be a number in \(0, 1\), got -0.5"),
    ({"eps": (0.1,)}, r"eps must be a tuple of at least two thresholds"),
    ({"eps": (0.3, 1.5)}, r"eps: every threshold must be a number in \(0, 1\), got 1.5"),
    ({"decay_k0": 0.0}, r"decay_k0 .* must be a finite positive number, got 0.0"),
    ({"eval_episodes": 0}, r"eval_episodes must be an integer >= 1, got 0"),
])
def test_bad_arguments_raise_naming_them(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        target_update.run(tmp_path / "run", **({"budget": TINY} | kwargs))
    assert not (tmp_path / "run").exists()


def test_finished_cells_are_reused_and_other_settings_refused(tmp_path):
    experiment = Experiment(tmp_path / "run", budget=TINY)
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}

    assert parts.cached_cell(experiment, "tabular_x_seed0", {"k": 3, "eps": (0.1,)}, compute) == {"value": 1}
    assert parts.cached_cell(experiment, "tabular_x_seed0", {"k": 3, "eps": [0.1]}, compute) == {"value": 1}
    assert len(calls) == 1
    with pytest.raises(ValueError, match=r"cell 'tabular_x_seed0' .* was run with other settings"):
        parts.cached_cell(experiment, "tabular_x_seed0", {"k": 4, "eps": [0.1]}, compute)


@pytest.mark.parametrize("slope", [1.0, 2.0, 2.7])
def test_exponent_fit_recovers_a_known_slope(slope):
    eps = (0.3, 0.1, 0.03, 0.01)
    rng = np.random.default_rng(0)
    exact = [500.0 * e**-slope for e in eps]
    assert parts.fit_exponent(eps, exact) == pytest.approx(slope, abs=1e-9)
    noisy = [s * math.exp(rng.normal(0, 0.02)) for s in exact]  # 2% multiplicative noise
    assert parts.fit_exponent(eps, noisy) == pytest.approx(slope, abs=0.05)
    # An unreached ε drops out of the fit; one point is no fit.
    assert parts.fit_exponent(eps, [*exact[:3], None]) == pytest.approx(slope, abs=1e-9)
    assert parts.fit_exponent(eps, [exact[0], None, None, None]) is None


def test_theory_slopes_and_worst_seed_counts():
    theory = parts.theory_slopes((0.3, 0.03))
    # log(1/ε)/ε² between ε = 0.3 and 0.03 (two points: the fit is the secant): 2 + log(ln(1/0.03)/ln(1/0.3)) / log(10).
    assert theory["adaptive"] == 2.0
    assert theory["constant"] == pytest.approx(2 + math.log(math.log(1 / 0.03) / math.log(1 / 0.3)) / math.log(10),
                                               abs=1e-9)
    seeds = [{"steps_to": {"0.1": 40, "0.03": None}}, {"steps_to": {"0.1": 70, "0.03": 900}}]
    assert parts.worst_steps(seeds, 0.1) == 70 and parts.worst_steps(seeds, 0.03) is None
    np.testing.assert_array_equal(parts.log_grid(1000, 4), [1, 10, 100, 1000])
