"""The tests mirror the layers, and the fast tier keeps a test of each file (issue 49): a folder
of tests/ per layer of `amqpcap/` (plus core/, the Rust core through `_core`, and whole/, the
end-to-end and project-wide checks); `pytest -m "not slow"` collects at least one test of every
test file; CI (the README's command 2) runs every test, slow or not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: test folders that are not a layer of amqpcap/
BESIDE_THE_LAYERS = {"core", "whole"}


def all_test_files() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in TESTS.rglob("test_*.py")}


def test_the_test_folders_are_the_layers():
    layers = {p.parent.name for p in (ROOT / "amqpcap").glob("*/__init__.py")}
    folders = {Path(f).parent.name for f in all_test_files()}
    assert folders == layers | BESIDE_THE_LAYERS
    assert not list(TESTS.glob("test_*.py")), "a test file belongs in the folder of the layer it tests"


def test_every_test_file_keeps_a_test_in_the_fast_tier():
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-m", "not slow", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    fast = {line.split("::")[0] for line in r.stdout.splitlines() if "::" in line}
    assert all_test_files() - fast == set()


def test_ci_runs_every_test_and_the_readme_names_the_fast_tier():
    """The README's command 2 (scripts/test.sh, what CI runs) selects no marker; the README says
    how to run the fast tier, with the marker pyproject.toml registers."""
    pytest_lines = [line for line in (ROOT / "scripts" / "test.sh").read_text().splitlines()
                    if re.search(r"-m pytest\b", line) and not line.lstrip().startswith("#")]
    assert pytest_lines and not any(re.search(r"\s-m\s+[\"']", line) for line in pytest_lines), pytest_lines
    assert 'pytest -m "not slow" -n 2' in (ROOT / "README.md").read_text()
    assert '"slow:' in (ROOT / "pyproject.toml").read_text()


def test_one_fast_marks_all_but_the_kept_and_refuses_a_name_it_does_not_have():
    marked = one_fast(["a.pcap", ROOT / "b.pcap", "c.pcap"], keep=("a.pcap", "b.pcap"))
    assert [getattr(v, "marks", ()) for v in marked[:2]] == [(), ()]
    assert [m.name for m in marked[2].marks] == ["slow"]
    with pytest.raises(ValueError, match="renamed.pcap"):
        one_fast(["a.pcap"], keep="renamed.pcap")
