"""Every ```python block of README.md and of docs/**/*.md runs, and the docs' tables state what they must.

Examples (`test_python_block_runs`, one case per block, named `<file>:<line of the fence>`):
- Each block runs in a fresh namespace whose `__name__` is "__docs__" (so a script's `if __name__ ==
  "__main__":` body does not run; its imports and definitions do), from a fresh temporary working directory.
  A block must be complete: its imports and inputs are in the block, and it shows the budget it runs at.
- A block that continues a command shown before it names that command in an HTML comment on the last
  non-blank line above its fence: `<!-- test-setup: python -m icml26zoo.train ARGS -->`. The test runs
  `icml26zoo.train`'s command line with ARGS in process (once per distinct ARGS, shared by the module) and
  copies the run's workdir into the block's working directory. Keep such markers rare.
- `<!-- test: skip (reason) -->` in the same place skips the block with that reason. None is used today.

The extras table (`test_install_extras_table_matches_pyproject`): docs/install.md's first table lists the
core and one row per extra of pyproject.toml's [project.optional-dependencies], exactly, and the [test] row
names every other extra.

Dates (`test_result_tables_state_their_date`): a result table is every markdown table of README.md's
"Results (measured)", "Paper reproductions" and "Leaderboard" sections, and every table of docs/papers/*.md
with a body cell that is a number ("0.93", "**3.13**", "4.2e-07", "18%"). Its section (from the nearest
heading above it down to the table), or the lines right after it up to the next table or heading, must hold
a date written YYYY-MM-DD: the date it was measured, next to the machine it ran on.

CPU cost: about 40 CPU-seconds for the whole file on the 2-core machine (2026-12-06), most of it the
Quickstart's 2-step setup run, the README's 20-step training example and the Platonic example's compile.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
import shutil
import tomllib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MARKER = re.compile(r"<!--\s*test(-setup)?:\s*(.*?)\s*-->")
TRAIN_COMMAND = "python -m icml26zoo.train "

# The examples compile small programs once each: XLA's cheap pipeline keeps that fast (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fast_compile")


@dataclasses.dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    code: str
    setup: str | None  # the ARGS of a test-setup marker
    skip: str | None  # the reason of a skip marker

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def python_blocks(path: pathlib.Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].strip() != "```python":
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        above = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        setup = skip = None
        if marker := MARKER.search(above):
            if marker.group(1):
                assert marker.group(2).startswith(TRAIN_COMMAND), f"{path}:{index + 1}: {above}"
                setup = marker.group(2).removeprefix(TRAIN_COMMAND)
            else:
                assert marker.group(2).startswith("skip (") and marker.group(2).endswith(")"), above
                skip = marker.group(2)[len("skip ("):-1]
        blocks.append(Block(path, index + 1, "\n".join(lines[index + 1:end]) + "\n", setup, skip))
        index = end + 1
    return blocks


DOC_FILES = [README, *sorted(DOCS.rglob("*.md"))]
BLOCKS = [block for path in DOC_FILES for block in python_blocks(path)]


def test_the_blocks_are_found():
    # A fence the parser misses would silently drop an example: every "```python" line is one block.
    fences = sum(path.read_text().count("```python\n") for path in DOC_FILES)
    assert len(BLOCKS) == fences >= 9, [block.name for block in BLOCKS]


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """The runs of the test-setup markers, trained once per module: ARGS -> the directory it ran in."""
    return {}


def _copy_setup_run(args: str, runs: dict[str, pathlib.Path], into: pathlib.Path,
                    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from icml26zoo.train.__main__ import main

    argv = shlex.split(args)
    if args not in runs:
        runs[args] = tmp_path_factory.mktemp("docs_setup_run")
        monkeypatch.chdir(runs[args])
        assert main(argv) == 0, args
    workdir = argv[argv.index("--workdir") + 1]
    shutil.copytree(runs[args] / workdir, into / workdir)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_python_block_runs(block: Block, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                           trained_runs: dict[str, pathlib.Path], tmp_path_factory: pytest.TempPathFactory):
    if block.skip:
        pytest.skip(block.skip)
    if block.setup:
        _copy_setup_run(block.setup, trained_runs, tmp_path, tmp_path_factory, monkeypatch)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    exec(compile(block.code, block.name, "exec"), namespace)


def _tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first line, line after the last) of every markdown table: a '|' row followed by a '|---' row."""
    found, index = [], 0
    while index < len(lines):
        if lines[index].startswith("|") and index + 1 < len(lines) and re.match(r"\|\s*:?-", lines[index + 1]):
            end = index
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((index, end))
            index = end
        else:
            index += 1
    return found


def test_install_extras_table_matches_pyproject():
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    lines = (DOCS / "install.md").read_text().splitlines()
    start, end = _tables(lines)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[start + 2:end]]
    installs = [re.search(r'pip install (?:-e )?"?\.(?:\[(\w+)\])?"?`', row[0]) for row in rows]
    assert all(installs), [row[0] for row in rows]
    listed = [match.group(1) for match in installs]
    assert listed[0] is None, "the first row is the core install (`pip install .`)"
    assert sorted(listed[1:]) == sorted(extras), (listed, extras)
    test_row = rows[listed.index("test")]
    assert all(f"`[{extra}]`" in test_row[1] for extra in extras - {"test"}), test_row


README_RESULT_SECTIONS = ("## Results (measured)", "## Paper reproductions", "## Leaderboard")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# A measured value: a number, maybe bold, signed, approximate, a percentage or a ratio ("0.93", "**3.13**", "4.2e-07").
NUMBER = re.compile(r"\**[~≈<>≤≥±+\-−]?\s*\d[\d,.]*(?:e[-+−]?\d+)?\s*[%×x]?\**")


def _result_tables() -> list[tuple[str, list[str], int, int]]:
    found = []
    readme = README.read_text().splitlines()
    for heading in README_RESULT_SECTIONS:
        start = readme.index(heading)
        end = next((i for i in range(start + 1, len(readme)) if readme[i].startswith("## ")), len(readme))
        found += [("README.md", readme, start + first, start + last) for first, last in _tables(readme[start:end])]
    for page in sorted((DOCS / "papers").glob("*.md")):
        lines = page.read_text().splitlines()
        found += [(f"docs/papers/{page.name}", lines, first, last) for first, last in _tables(lines)
                  if any(NUMBER.fullmatch(cell.strip()) for line in lines[first + 2:last] for cell in line.split("|"))]
    return found


def test_result_tables_state_their_date():
    tables = _result_tables()
    assert len(tables) > 40, len(tables)
    undated = []
    for name, lines, first, last in tables:
        heading = next((i for i in range(first - 1, -1, -1) if lines[i].startswith("#")), 0)
        after = last
        while after < len(lines) and not lines[after].startswith(("#", "|")):
            after += 1
        if not DATE.search("\n".join(lines[heading:first] + lines[last:after])):
            undated.append(f"{name}:{first + 1} {lines[first][:60]}")
    assert not undated, "result tables without a YYYY-MM-DD date in their section:\n" + "\n".join(undated)
