"""The first two cells of every notebook, rendered from pyproject.toml: an "Open in Colab" badge and the
Colab install cell, both built from `[project.urls] Repository`, the one place the URL is written.

    python scripts/notebook_cells.py           # rewrite the header cells of notebooks/*.ipynb
    python scripts/notebook_cells.py --check   # exit 1, naming the notebooks whose header is stale

tests/test_notebooks.py checks that every notebook starts with exactly these cells, so the URL in the
notebooks cannot drift from pyproject.toml.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import tomllib
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
NOTEBOOKS = REPO / "notebooks"
INSTALL_TAG = "install"
BADGE_ID, INSTALL_ID = "colab-badge", "install"
DEFAULT_EXTRAS = ("train",)
COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"
GITHUB_URL = re.compile(r"https://github\.com/(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+?)(\.git)?/?")

Cell = dict[str, Any]


def project_metadata(pyproject: pathlib.Path = PYPROJECT) -> tuple[str, str]:
    """(distribution name, repository URL) from pyproject's `[project]` name and `[project.urls] Repository`."""
    project = tomllib.loads(pyproject.read_text())["project"]
    url = project.get("urls", {}).get("Repository")
    if not isinstance(url, str) or not GITHUB_URL.fullmatch(url):
        raise ValueError(f"[project.urls] Repository in {pyproject} must be https://github.com/<owner>/<repo>, "
                         f"got {url!r}")
    return project["name"], url


def github_slug(url: str) -> str:
    """The "owner/repo" part of a GitHub URL: `https://github.com/a/b.git` -> "a/b"."""
    match = GITHUB_URL.fullmatch(url)
    if match is None:
        raise ValueError(f"url must be https://github.com/<owner>/<repo>, got {url!r}")
    return f"{match['owner']}/{match['repo']}"


def badge_cell(notebook: str, url: str) -> Cell:
    """The markdown cell linking notebook `notebook` (a file stem in notebooks/) on Colab, branch main."""
    colab = f"https://colab.research.google.com/github/{github_slug(url)}/blob/main/notebooks/{notebook}.ipynb"
    return {"cell_type": "markdown", "id": BADGE_ID, "metadata": {},
            "source": [f"[![Open In Colab]({COLAB_BADGE_SVG})]({colab})"]}


def install_cell(distribution: str, url: str, extras: tuple[str, ...] = DEFAULT_EXTRAS) -> Cell:
    """The code cell installing the zoo with `extras` (default: the training extra) from the repository
    (tagged "install")."""
    what = "its training extra" if extras == DEFAULT_EXTRAS else f"its {', '.join(extras)} extras"
    source = [
        f"# For Colab: install the zoo with {what}. Locally, `make setup` has already installed it.\n",
        f'%pip install "{distribution}[{",".join(extras)}] @ git+{url}"',
    ]
    return {"cell_type": "code", "execution_count": None, "id": INSTALL_ID, "metadata": {"tags": [INSTALL_TAG]},
            "outputs": [], "source": source}


def notebook_extras(path: pathlib.Path) -> tuple[str, ...]:
    """The extras a notebook's install cell installs: its metadata `{"icml26zoo": {"extras": [...]}}`, or
    the training extra alone. A notebook that needs a field library (e.g. gymnax, `[rl]`) names it there."""
    metadata = json.loads(path.read_text()).get("metadata", {}).get("icml26zoo", {})
    extras = tuple(metadata.get("extras", DEFAULT_EXTRAS))
    if not extras or not all(isinstance(e, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", e) for e in extras):
        raise ValueError(f"{path}: metadata icml26zoo.extras must be a non-empty list of extra names, got {extras!r}")
    return extras


def header_cells(notebook: str, pyproject: pathlib.Path = PYPROJECT,
                 extras: tuple[str, ...] = DEFAULT_EXTRAS) -> list[Cell]:
    """The badge and install cells notebook `notebook` must start with."""
    distribution, url = project_metadata(pyproject)
    return [badge_cell(notebook, url), install_cell(distribution, url, extras)]


def comparable(cell: Cell) -> tuple[str, str, tuple[str, ...]]:
    """What a header cell is checked on: its type, its source text and its tags (not outputs or ids)."""
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else source
    return cell["cell_type"], text, tuple(cell.get("metadata", {}).get("tags", ()))


def has_current_header(path: pathlib.Path, pyproject: pathlib.Path = PYPROJECT) -> bool:
    """Whether the notebook at `path` starts with exactly `header_cells` of its name."""
    cells = json.loads(path.read_text())["cells"]
    expected = header_cells(path.stem, pyproject, notebook_extras(path))
    return [comparable(c) for c in cells[: len(expected)]] == [comparable(c) for c in expected]


def write_header(path: pathlib.Path, pyproject: pathlib.Path = PYPROJECT) -> None:
    """Replaces the notebook's header cells (found by their ids) with freshly rendered ones, in place."""
    notebook = json.loads(path.read_text())
    body = [cell for cell in notebook["cells"] if cell.get("id") not in (BADGE_ID, INSTALL_ID)]
    notebook["cells"] = header_cells(path.stem, pyproject, notebook_extras(path)) + body
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--check", action="store_true", help="only report notebooks whose header is stale")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    stale = [path for path in paths if not has_current_header(path)]
    if args.check:
        for path in stale:
            print(f"{path}: header cells differ from pyproject.toml; run python scripts/notebook_cells.py")
        return 1 if stale else 0
    for path in stale:
        write_header(path)
        print(f"{path}: header cells rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
