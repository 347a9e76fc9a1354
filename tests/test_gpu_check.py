"""scripts/gpu_check.py --dry-run runs end to end on CPU (tiny shapes, interpreted kernels) and writes every
row: the sanity row (matmul and HBM), three accuracy pairs per op with finite, small errors, timing rows
and the H4 dense-bias rows.

The dry run covers one attention op and one recurrence (`--ops fox,gdn`): every op's Pallas path against its
XLA path and reference on CPU is the kernel tests' job; here the script's own wiring is under test, and the
table of ops it covers is checked without running them."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
OPS = {"fox", "fix", "deltanet", "gdn", "kda", "mdn", "ssd_scalar", "ssd_diagonal", "selective_scan"}
PAIRS = {"pallas vs xla", "pallas vs reference", "xla vs reference"}
# The C0 goal of the performance notes: max-abs error <= 1e-4 in float32, forward and gradients.
MAX_ABS = 1e-4


DRY_OPS = {"fox", "gdn"}


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the script defines them.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_check_covers_every_op_and_rejects_unknown_ones():
    script = load_script()
    assert set(script.OPS) == OPS
    assert script.parse_ops("gdn, fox") == ["gdn", "fox"]
    for bad in ("", "fox,flash"):
        with pytest.raises(argparse.ArgumentTypeError, match="--ops"):
            script.parse_ops(bad)


def test_dry_run_writes_every_row(tmp_path):
    out = tmp_path / "dry.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--ops", ",".join(sorted(DRY_OPS)), "--out",
                           str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    sanity = [r for r in rows if r["section"] == "sanity"]
    assert len(sanity) == 1 and sanity[0]["tflops"] > 0 and sanity[0]["hbm_tbps"] > 0 and sanity[0]["jax"]
    accuracy = [r for r in rows if r["section"] == "accuracy"]
    assert {(r["op"], r["pair"]) for r in accuracy} == {(op, pair) for op in DRY_OPS for pair in PAIRS}
    for r in accuracy:
        for key in ("fwd_max_abs", "grad_max_abs"):
            assert math.isfinite(r[key]) and r[key] < MAX_ABS, f"{r['op']} {r['pair']} {key} = {r[key]}"
    timing = [r for r in rows if r["section"] == "timing"]
    assert {(r["path"], r["kind"]) for r in timing} == {(p, k) for p in ("pallas", "xla") for k in ("fwd", "fwd+bwd")}
    assert {r["op"] for r in timing} == DRY_OPS
    for r in timing:
        assert r["error"] is None and math.isfinite(r["ms"]) and r["ms"] > 0, r
    prior = [r for r in rows if r["section"] == "prior"]
    assert {(r["path"], r["kind"]) for r in prior} == {("xla", "fwd"), ("xla", "fwd+bwd")}
    for r in prior:
        assert r["error"] is None and math.isfinite(r["ratio"]) and r["ratio"] > 0, r
    assert "H0 bf16 matmul" in done.stdout and "gdn float32 pallas vs reference" in done.stdout
