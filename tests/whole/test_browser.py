"""report.html in a real headless browser (Debian's `chromium`) at 1400 px wide: the sample's
report and the largest fixture's (by packets, from the tshark facts), everything collapsed as it
opens and everything expanded: no horizontal overflow, a height in proportion to what is worth
reading (the sample's within 5 screens of 900 px), no console error, nothing loaded but the file
itself and its embedded images. Full-page screenshots go to $AMQPCAP_SCREENSHOTS (default: a
temporary directory)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import run_all
from amqpcap.report.outputs import write_outputs
from amqpcap.summary.build import build_summary
from amqpcap.summary.prepared import prepare

from browser import CHROMIUM, Browser
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
SAMPLE = ROOT / "amqpcap" / "data" / "sample.pcap"
WIDTH, SCREEN = 1400, 900

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed (apt-get install chromium)")


def largest_fixture() -> Path:
    """The fixture with the most packets, as tshark counted them."""
    facts = [(json.loads(p.read_text())["packets"], p) for p in FIX.glob("*.tshark.json")]
    _, path = max(facts)
    return path.with_name(path.name.removesuffix(".tshark.json"))


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    path = Path(os.environ.get("AMQPCAP_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser():
    with Browser(WIDTH, SCREEN) as b:
        yield b


def report(capture: Path, out: Path) -> tuple[Path, dict]:
    cap = amqpcap.load(capture)
    results = run_all(cap)
    summary = build_summary(cap, results)
    write_outputs(cap, results, prepare(cap, results, summary), out)
    return out / "report.html", summary


MEASURE = """({scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth,
  height: document.documentElement.scrollHeight,
  wide: Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right
        > document.documentElement.clientWidth + 0.5).slice(0, 3).map(e => e.tagName + ' ' + e.textContent.slice(0, 60)),
  images: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length})"""


@pytest.mark.parametrize("which", one_fast(["sample", "largest"], keep="sample"))
def test_report_reads_at_1400_px(which, browser, shots, tmp_path):
    capture = SAMPLE if which == "sample" else largest_fixture()
    page, summary = report(capture, tmp_path / "out")
    name = capture.name.split(".")[0]
    browser.errors.clear()
    browser.requests.clear()
    browser.open(page.as_uri())

    m = browser.js(MEASURE)
    browser.screenshot(shots / f"report-{name}.png")
    assert m["scrollWidth"] <= m["clientWidth"], m["wide"]
    # collapsed, the page holds the overview and the findings: about a screen for the top and one
    # per finding at most; the sample's (2 findings at the time of writing) within 5 screens
    assert m["height"] <= SCREEN * (2 + len(summary["findings"])), m["height"]
    if which == "sample":
        assert m["height"] <= 5 * SCREEN

    browser.js("document.querySelectorAll('details').forEach(d => d.open = true); true")
    m = browser.js(MEASURE)
    browser.screenshot(shots / f"report-{name}-expanded.png")
    assert m["scrollWidth"] <= m["clientWidth"], m["wide"]
    assert m["images"] == 0  # every embedded plot decodes

    assert browser.errors == []
    assert all(u == page.as_uri() or u.startswith("data:") for u in browser.requests), browser.requests
