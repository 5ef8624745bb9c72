"""report.html and the plots behind it, without a browser (tests/whole/test_browser.py renders it):
the page's structure (overview, then findings, then collapsed details; a few rows and key
columns per table, with links to the files; nothing external), and plots that stay readable
(plain tick labels, no per-event steps at prefetch 1, every consumer a row or counted, empty
window panels not drawn)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import amqpcap
from amqpcap.report import html as report_html
from amqpcap.engine.registered import run_all
from amqpcap.model.plotting import TIME_BINS, WORST_NAMED, plain, time_per_bin
from amqpcap.report.outputs import write_outputs
from amqpcap.summary.build import build_summary
from amqpcap.summary.prepared import prepare
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
SAMPLE = ROOT / "amqpcap" / "data" / "sample.pcap"


class Page(HTMLParser):
    """The bits of a page the tests look at: tables (rows of cells; a finding's evidence list
    apart), details, links, sources."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.evidence: list[list[list[str]]] = []
        self.details: list[dict] = []
        self.urls: list[str] = []
        self.tags: list[str] = []
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "table":
            self._rows = []
            (self.evidence if a.get("class") == "evidence" else self.tables).append(self._rows)
        elif tag == "tr":
            self._rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "details":
            self.details.append(a)
        for key in ("src", "href"):
            if key in a:
                self.urls.append(a[key])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    cap = amqpcap.load(SAMPLE)
    results = run_all(cap)
    summary = build_summary(cap, results)
    write_outputs(cap, results, prepare(cap, results, summary), out)
    return out, summary


def test_overview_first_then_findings_then_collapsed_details(sample_report):
    out, summary = sample_report
    text = (out / "report.html").read_text()
    assert text.index("id='overview'") < text.index("id='findings'") < text.index("<h2>Details</h2>")
    assert summary["overview"]["story"] in text.replace("&#x27;", "'")
    assert text.count('<div class="finding ') == len(summary["findings"])
    page = Page(text)
    assert page.details and not any("open" in d for d in page.details)  # everything below collapsed


def test_offline_no_script_nothing_external(sample_report):
    out, _ = sample_report
    page = Page((out / "report.html").read_text())
    assert "script" not in page.tags
    for url in page.urls:
        assert url.startswith(("data:image/png;base64,", "#")) or (out / url).is_file(), url


def test_tables_show_a_few_rows_and_key_columns_with_a_link_to_the_file(sample_report):
    out, _ = sample_report
    text = (out / "report.html").read_text()
    page = Page(text)
    for table in page.tables:
        if table and table[0] and table[0][0] == "method":  # the methods list: whole, there is no file
            continue
        assert len(table) - 1 <= max(report_html.MAX_ROWS, report_html.MAX_SUBJECTS)
        assert all(len(row) <= report_html.MAX_COLS for row in table)
    # every analyzer table with rows links its CSV; the ones whose key columns lead with a name start with it
    for csv in out.glob("*-*.csv"):
        if len(csv.read_text().splitlines()) > 1:
            assert f'href="{csv.name}"' in text, csv.name
    for base in ("connections", "anomalies", "frames", "packets"):  # the capture's own tables, when written
        if (out / f"{base}.csv").exists() and (base != "anomalies" or "Anomalies" in text):
            assert f'href="{base}.csv"' in text, base
    heads = [t[0] for t in page.tables if t and t[0] and t[0][0] == "connection"]
    assert len(heads) >= 8  # consumers, latency, nagle, sizes and stalls tables lead with the connection's label
    assert "perf-test-consumer-0" in text and "stream 1 channel" not in text


def test_long_tables_cut_to_the_rows_that_matter(sample_report):
    """stalls: the longest first; latency deliveries: the first rows, and the note says so."""
    out, _ = sample_report
    text = (out / "report.html").read_text()
    assert "Showing the first 10 of 454 rows" in text  # latency-deliveries (tshark: 454 deliveries)


def test_empty_tables_and_panels_are_not_drawn(sample_report):
    """The sample has no publisher confirms (tshark: no confirm.select) and no receive window
    ever held a sender back (tshark: no zero window, no window full): no confirms table, no
    window panels, no stall timeline (all its stalls are idle)."""
    out, _ = sample_report
    f = json.loads((FIX / "slow-prefetch1.pcap.tshark.json").read_text())
    assert "85.10" not in f["methods"] and f["tcp_analysis"]["zero_window"] == f["tcp_analysis"]["window_full"] == 0
    text = (out / "report.html").read_text()
    assert "table confirms" not in text and "Empty in this capture: confirms" in text
    assert not (out / "stalls-window.png").exists() and not (out / "stalls-timeline.png").exists()
    pngs = sorted(out.glob("*.png"))
    # every plot drawn is embedded, plus the messages/s plot at the top
    assert len(re.findall(r'src="data:image/png;base64,', text)) == len(pngs) + 1 > 1
    assert text.index('class="rates"') < text.index("id='findings'")


def test_methods_are_0_9_1_methods_and_not_shown_for_amqp10_alone(sample_report, tmp_path):
    """The Methods section counts AMQP 0-9-1 methods (tshark's method counts of the sample); a
    capture of AMQP 1.0 alone (tshark: no 0-9-1 method) has no Methods section, empty, beside
    the amqp10 analyzer's section."""
    out, _ = sample_report
    kinds = len(json.loads((FIX / "slow-prefetch1.pcap.tshark.json").read_text())["methods"])
    assert f"{kinds:,} kinds of AMQP 0-9-1 method frame" in (out / "report.html").read_text()
    name = "amqp10-credit1.pcap"
    assert not json.loads((FIX / f"{name}.tshark.json").read_text())["methods"]
    cap = amqpcap.load(FIX / name)
    results = run_all(cap)
    write_outputs(cap, results, prepare(cap, results, build_summary(cap, results)), tmp_path)
    text = (tmp_path / "report.html").read_text()
    assert "<summary>Methods" not in text and '<summary>amqp10 <span class="note">AMQP 1.0 links' in text


def test_finding_card_lists_subjects_names_first_and_how_many_more():
    subjects = [{"connection": f"app-{i}", "stream": i, "channel": 1, "queue": "orders",
                 "consumer_tag": f"amq.ctag-{i}", "share_at_limit": 0.9 - i / 100, "estimated": False,
                 "deliveries": 100 + i} for i in range(25)]
    card = report_html._finding({"id": "x", "severity": "warning", "title": "T", "advice": "A", "subjects": subjects,
                                 "evidence": {"filter": "tcp.stream in {0, 1}", "streams": [0, 1]}})
    (table, *_) = Page(card).tables
    assert table[0][:2] == ["connection", "queue"] and table[0][-1] == "stream"
    assert "consumer tag" not in table[0] and "estimated" not in table[0]  # random tags, all-false flags
    assert [r[0] for r in table[1:]] == [f"app-{i}" for i in range(report_html.MAX_SUBJECTS)]
    assert table[1][table[0].index("share at limit")] == "90%"
    assert "+15 more" in card
    assert '<pre class="filter">tcp.stream in {0, 1}</pre>' in card


# --- plots --------------------------------------------------------------------------------------

def draw_all(cap, tmp_path: Path) -> dict:
    """Every plot of every analyzer drawn; {name: its matplotlib figure} (left open to inspect)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    for r in run_all(cap):
        for p in r.plots:
            plt.close("all")
            p.draw(tmp_path / f"{p.name}.png")
            figs[p.name] = plt.gcf()
    return figs


def tick_labels(fig) -> list[str]:
    out = []
    for ax in fig.axes:
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() + ax.get_yticklabels(minor=True)]
    return [t for t in out if t]


def test_plain_labels():
    assert [plain(v) for v in (0, 1, 6, 20_000, 0.5, 0.002, 65536)] == ["0", "1", "6", "20,000", "0.5", "0.002",
                                                                          "65,536"]


def test_time_per_bin_equals_brute_force_overlap():
    rng = np.random.default_rng(3)
    edges = np.linspace(0, 10, 21)
    s = rng.uniform(-1, 10, 400)
    e = s + rng.exponential(2, 400)
    code, w = rng.integers(0, 5, 400), rng.uniform(0, 3, 400)
    got = time_per_bin(code, s, e, edges, 5, w)
    lo, hi = np.maximum(s[:, None], edges[None, :-1]), np.minimum(e[:, None], edges[None, 1:])
    want = np.zeros((5, 20))
    np.add.at(want, code, np.clip(hi - lo, 0, None) * w[:, None])
    assert np.allclose(got, want)


@pytest.fixture(scope="module")
def many_consumers(tmp_path_factory):
    """12 copies of prefetch-consumers.pcap (3 consumers each): 36 consumers."""
    path = tmp_path_factory.mktemp("many") / "many.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_capture.py"), str(FIX / "prefetch-consumers.pcap"),
                    str(path), "--packets", str(12 * 1762)], check=True, capture_output=True)
    return path


@pytest.mark.parametrize("name", one_fast(["slow-prefetch1.pcap", "prefetch1.pcap", "prefetch-consumers.pcap",
                                           "zero-window.pcap", "memory-alarm.pcap", "many"], keep="prefetch-consumers.pcap"))
def test_plots_read_naturally(name, many_consumers, tmp_path):
    cap = amqpcap.load(many_consumers if name == "many" else FIX / name)
    figs = draw_all(cap, tmp_path)
    for plot, fig in figs.items():
        for label in tick_labels(fig):
            assert not re.search(r"\$|\^|×|e[+-]\d|\dx10", label), (plot, label)  # no 6 × 10^0, no 1e-03
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:  # a legend names at most a few series; more are counted in its title or the plot's
                assert len(legend.get_texts()) <= 8, plot


@pytest.mark.slow
@pytest.mark.parametrize("name, prefetch", [("prefetch1.pcap", 1), ("slow-prefetch1.pcap", 1), ("many", 20)])
def test_consumers_plot_bins_time_not_steps(name, prefetch, many_consumers, tmp_path):
    """At prefetch 1 every delivery and ack is a step: ~900 steps in 3 s drew a solid block. The
    plot shows the share of each time bin at the limit (one image row per consumer) and the
    unacked mean per bin: at most TIME_BINS points per line, whatever the number of events."""
    cap = amqpcap.load(many_consumers if name == "many" else FIX / name)
    fig = draw_all(cap, tmp_path)["consumers-unacked-deficit"]
    heat, lines = fig.axes[0], fig.axes[1]
    (img,) = heat.get_images()
    data = img.get_array()
    n = len(cap.frames.loc[cap.frames["method"] == "basic.consume", "stream"])
    assert data.shape == (n, TIME_BINS)  # one row per consumer (PerfTest: one basic.consume each)
    assert np.nanmin(data) >= 0 and np.nanmax(data) <= 1
    assert all(len(line.get_xdata()) <= TIME_BINS + 1 for line in lines.get_lines())
    assert any(np.isclose(line.get_ydata()[0], prefetch) for line in lines.get_lines())  # the dotted prefetch
    if n > 30:  # too many to name: counted in the title, the worst named
        assert f"{n:,} consumers" in heat.get_title(loc="left")


@pytest.mark.slow
def test_many_consumers_latency_plots_count_them_and_name_the_slowest(many_consumers, tmp_path):
    cap = amqpcap.load(many_consumers)
    figs = draw_all(cap, tmp_path)
    n = 36
    legend = figs["latency-over-time"].axes[0].get_legend()
    assert f"{n} consumers" in legend.get_title().get_text()
    assert len(legend.get_texts()) == 1 + WORST_NAMED
    cdf = [t.get_text() for t in figs["latency-cdf"].axes[0].get_legend().get_texts()]
    assert any(f"all {n} consumers" in t for t in cdf)


@pytest.mark.slow
def test_window_panels_only_for_held_back_directions(tmp_path):
    """zero-window: the consumer advertised zero windows (tshark: 2) and the broker sent 87
    window-full segments, all broker → client on one connection: one panel, that direction."""
    f = json.loads((FIX / "zero-window.pcap.tshark.json").read_text())
    assert f["tcp_analysis"]["zero_window"] > 0 and f["tcp_analysis"]["window_full"] > 0
    figs = draw_all(amqpcap.load(FIX / "zero-window.pcap"), tmp_path)
    axes = figs["stalls-window"].axes
    title = axes[0].get_title(loc="left")
    assert len(axes) == 1 and " s2c: " in title and "87 window-full" in title and "zero window 2 times" in title
    assert axes[0].get_ylabel() == "KiB"
