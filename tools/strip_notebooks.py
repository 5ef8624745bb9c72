#!/usr/bin/env python3
"""Clear outputs, execution counts and run metadata of the notebooks in notebooks/ (they are
committed without outputs; tests/whole/test_notebooks.py checks it and executes them).

Usage: python tools/strip_notebooks.py [NOTEBOOK.ipynb ...]   # default: every notebook
"""

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def strip(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    after = nbformat.writes(nb)
    if after != before:
        nbformat.write(nb, path)
    return after != before


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        print(f"{'stripped' if strip(path) else 'clean   '} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
