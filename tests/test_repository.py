"""Repository hygiene: nothing cites files outside the repository, scripts import the installed package."""

import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# Paths of the project's private notes, which are not part of the repository: a citation of one is a
# dead link for every reader. Papers are cited by name and arXiv id instead (docs/papers.md), design rules
# and goals by docs/numerics.md and docs/performance.md.
OUTSIDE_PATH = re.compile(r"\.\./shared\b|(?<![\w.-])(?:specs|research|seeds)/|\b(?:DESIGN|PERFORMANCE)\.md\b")
# The same notes cited by their short names ("spec 03 §3", "mixers-02 §2.4", "train-08", "spec B.4").
OUTSIDE_NAME = re.compile(
    r"(?<![\w-])(?:mixers|train|geo)-\d\d\b|\bspecs? \d\d\b|\bspec (?:§|[A-D]\.\d|invariant)", re.IGNORECASE
)


def _tracked_text_files() -> list[pathlib.Path]:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = []
    for name in names.splitlines():
        path = REPO / name
        if not path.is_file() or path == pathlib.Path(__file__).resolve():
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def _citations(pattern: re.Pattern) -> list[str]:
    hits = []
    for path in _tracked_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    return hits


def test_git_lists_the_repository_files():
    files = {p.relative_to(REPO).as_posix() for p in _tracked_text_files()}
    assert {"README.md", "pyproject.toml", "zoo/__init__.py"} <= files


@pytest.mark.parametrize("pattern", [OUTSIDE_PATH, OUTSIDE_NAME], ids=["paths", "short-names"])
def test_no_tracked_file_cites_notes_outside_the_repository(pattern):
    hits = _citations(pattern)
    assert not hits, "cite the paper by name and arXiv id (docs/papers.md) instead of:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "text",
    ["see specs/mixers-02-mdn-deltanet.md", "(../shared/DESIGN.md)", "`research/000_abstract.txt`",
     "seeds/a.md", "spec 03 §3", "specs 06", "mixers-01 Part B", "spec train-08", "(spec §2.4)", "spec B.4",
     "Spec invariant 3", "see DESIGN.md", "PERFORMANCE.md C1"],
)
def test_the_patterns_catch_each_form_of_citation(text):
    assert OUTSIDE_PATH.search(text) or OUTSIDE_NAME.search(text)


@pytest.mark.parametrize(
    "text", ["github.com/mlresearch/v306", "pre-train-10x", "seed 3", "docs/performance.md C1", "in_specs=(spec, spec)"]
)
def test_the_patterns_leave_ordinary_text_alone(text):
    assert not (OUTSIDE_PATH.search(text) or OUTSIDE_NAME.search(text))


def test_scripts_do_not_edit_sys_path():
    scripts = sorted((REPO / "scripts").glob("*.py"))
    assert scripts
    offenders = [p.name for p in scripts if re.search(r"\bsys\.path\b", p.read_text(encoding="utf-8"))]
    assert not offenders, f"scripts must import the installed package, not edit sys.path: {offenders}"
