"""Where the test suite's CPU time goes: per family and per test file, in CPU-seconds (user + system).

    python scripts/suite_profile.py                          # runs `pytest -n 2 --dist loadscope` (as make test)
    python scripts/suite_profile.py -- tests/repro -k smoke  # a subset (arguments after -- go to pytest)
    python scripts/suite_profile.py --from DIR               # report a profile recorded earlier
    python scripts/suite_profile.py --out docs/suite_profile.md --top 40

CPU time is the suite's budget (docs/contributing.md, "The test suite and its budget": 2,600 CPU-seconds for a fresh
clone's `make test`) because wall time on a shared 2-core machine moves by 1.5x while CPU time does not. Each pytest
worker records every test's CPU seconds (its own, all threads, setup + call + teardown) and the CPU of the child
processes the test waited for (tests/conftest.py, enabled by ZOO_SUITE_PROFILE=<dir>). The total below is the CPU of
the whole pytest run (workers, collection and start-up included), measured from this process's children;
"unattributed" is the part no single test holds (interpreter and JAX start-up, collection, module-scoped fixtures).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
# test file -> family, first match wins; otherwise the family is the file's folder under tests/.
FAMILIES = (
    ("tests/test_notebooks.py", "notebooks (SMOKE)"),
    ("tests/repro/test_experiments.py", "experiment contract"),
    ("tests/zoo/test_conformance", "model conformance"),
    ("tests/kernels/", "kernels"),
    ("tests/zoo/geometric/", "zoo/geometric"),
    ("tests/zoo/", "zoo"),
    ("tests/train/", "train"),
    ("tests/repro/", "repro (property tests)"),
    ("tests/", "repository, install, layering"),
)


def family(path: str) -> str:
    for prefix, name in FAMILIES:
        if path.startswith(prefix):
            return name
    return "other"


def run_suite(pytest_args: list[str], record_dir: pathlib.Path) -> dict:
    """Runs pytest (from the repository, with the profile switched on); returns its exit code, CPU and wall."""
    env = dict(os.environ, ZOO_SUITE_PROFILE=str(record_dir))
    command = [sys.executable, "-m", "pytest", *pytest_args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.call(command, cwd=REPO, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"command": " ".join(command[1:]), "exit_code": code, "cpu_seconds": round(cpu, 1),
            "wall_seconds": round(wall, 1), "load_average": os.getloadavg()}


def read_records(record_dir: pathlib.Path) -> list[dict]:
    records = []
    for path in sorted(record_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def summarize(records: list[dict], run: dict | None, *, top: int) -> str:
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for record in records:
        path = record["test"].split("::")[0]
        entry = by_file[path]
        entry[0] += record["cpu"] + record["children"]
        entry[1] += record["wall"]
        entry[2] += 1
    by_family: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
    for path, (cpu, _, count) in by_file.items():
        entry = by_family[family(path)]
        entry[0] += cpu
        entry[1] += count
        entry[2] += 1
    attributed = sum(entry[0] for entry in by_file.values())
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    lines = [f"# Test suite profile ({date})", "",
             f"Machine: {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, Python "
             f"{platform.python_version()}.", ""]
    if run is not None:
        load = ", ".join(f"{x:.1f}" for x in run["load_average"])
        lines += [f"`{run['command']}`: exit {run['exit_code']}, **{run['cpu_seconds']:,.0f} CPU-seconds** (user + "
                  f"system of pytest and its workers), {run['wall_seconds']:,.0f} s wall; load average at the end "
                  f"{load}.", ""]
    lines += [f"{len(records):,} tests in {len(by_file)} files; CPU held by tests {attributed:,.0f} s"
              + (f", unattributed {run['cpu_seconds'] - attributed:,.0f} s" if run else "") + ".", "",
              "| family | files | tests | CPU-s | share |", "|---|---:|---:|---:|---:|"]
    total = max(attributed, 1e-9)
    for name, (cpu, count, files) in sorted(by_family.items(), key=lambda item: -item[1][0]):
        lines.append(f"| {name} | {files} | {count:,} | {cpu:,.0f} | {cpu / total:.0%} |")
    lines += ["", f"The {top} most expensive files:", "", "| file | tests | CPU-s | wall-s |", "|---|---:|---:|---:|"]
    for path, (cpu, wall, count) in sorted(by_file.items(), key=lambda item: -item[1][0])[:top]:
        lines.append(f"| {path} | {count} | {cpu:,.1f} | {wall:,.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        split = argv.index("--")
        argv, pytest_args = argv[:split], argv[split + 1:]
    else:
        pytest_args = ["-n", "2", "--dist", "loadscope", "-q"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", help="a directory of recorded *.jsonl profiles (runs nothing)")
    parser.add_argument("--out", help="also write the report (markdown) here")
    parser.add_argument("--top", type=int, default=30, help="files listed (default 30)")
    args = parser.parse_args(argv)
    run = None
    if args.source:
        record_dir = pathlib.Path(args.source)
        if not record_dir.is_dir():
            parser.error(f"--from {args.source!r} is not a directory")
    else:
        record_dir = pathlib.Path(tempfile.mkdtemp(prefix="zoo_suite_profile_"))
        run = run_suite(pytest_args, record_dir)
    report = summarize(read_records(record_dir), run, top=args.top)
    print(report)
    if args.out:
        pathlib.Path(args.out).write_text(report)
    return 0 if run is None else run["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
