"""The notebooks in notebooks/ run top to bottom on the committed fixtures and draw their plots;
in git they carry no outputs (run them to see the results)."""

from __future__ import annotations

import os
from pathlib import Path

import nbclient  # the `test` extra installs nbformat, nbclient and ipykernel (the python3 kernel)
import nbformat
import pytest

import amqpcap
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
NB_DIR = ROOT / "notebooks"
# every notebook is executed; these three must exist (README and docs link to them)
NOTEBOOKS = sorted(p.stem for p in NB_DIR.glob("*.ipynb"))


def test_the_notebooks_are_there():
    assert {"quickstart", "consumer-latency", "small-packets"} <= set(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_outputs_stripped(name):
    nb = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}.ipynb cell {i} has outputs: clear them before committing"
            assert cell.execution_count is None, f"{name}.ipynb cell {i} has an execution count"


def _kernel_env() -> dict[str, str]:
    """The kernel inherits the environment; make it import the same amqpcap as these tests
    (a source tree on PYTHONPATH, or the installed package)."""
    env = dict(os.environ)
    package_parent = str(Path(amqpcap.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


@pytest.mark.parametrize("name", one_fast(NOTEBOOKS, keep="quickstart"))
def test_notebook_runs_and_plots(name):
    nb = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NB_DIR)}})  # cwd = notebooks/
    client.execute(env=_kernel_env())  # raises CellExecutionError on the first failing cell

    pngs = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert not [o for o in cell.outputs if o.output_type == "error"], f"{name}.ipynb cell {i}"
        cell_pngs = sum(1 for o in cell.outputs if "image/png" in o.get("data", {}))
        if "plt.show()" in cell.source or "display(Image" in cell.source:
            assert cell_pngs >= 1, f"{name}.ipynb cell {i} draws a plot but produced no image/png output"
        pngs += cell_pngs
    assert pngs >= 1, f"{name}.ipynb produced no image/png output"
