"""One definition per rate (amqpcap/derive/rates.py): a consumer's delivery rate is one number,
named by its span, wherever it is shown: the overview (summary.json), the clients, consumers and
latency tables and report.html's tables. The expected values come from tshark: the basic.deliver
frames per TCP stream and their packets' times, the capture's first and last packet."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = [ROOT / "amqpcap" / "data" / "sample.pcap", ROOT / "fixtures" / "prefetch-consumers.pcap"]
DELIVER = "amqp.method.method == 60 && amqp.method.class == 60"


def _tshark(path: Path, *args: str) -> list[list[str]]:
    out = subprocess.run(["tshark", "-r", str(path), *args], capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def expected(path: Path) -> tuple[pd.DataFrame, float]:
    """Per TCP stream whose basic.deliver frames all name one consumer tag: its deliveries,
    per second active ((n − 1) / first to last delivery) and its tag; and the capture's
    duration (first to last packet), all from tshark's fields (times as exact decimals)."""
    rows = _tshark(path, "-Y", DELIVER, "-T", "fields", "-e", "tcp.stream", "-e", "frame.time_epoch",
                   "-e", "amqp.method.class", "-e", "amqp.method.method", "-e", "amqp.method.arguments.consumer_tag")
    per: dict[int, dict] = {}
    for stream, t, classes, methods, tags in rows:
        # a packet may hold several frames: count its basic.deliver method frames
        n = sum(1 for c, m in zip(classes.split(","), methods.split(",")) if (c, m) == ("60", "60"))
        s = per.setdefault(int(stream), {"n": 0, "first": None, "last": None, "tags": set()})
        s["n"] += n
        s["first"] = Decimal(t) if s["first"] is None else min(s["first"], Decimal(t))
        s["last"] = Decimal(t) if s["last"] is None else max(s["last"], Decimal(t))
        s["tags"] |= set(tags.split(","))
    times = [Decimal(r[0]) for r in _tshark(path, "-T", "fields", "-e", "frame.time_epoch")]
    capture_s = float(max(times) - min(times))
    one = {k: v for k, v in per.items() if len(v["tags"]) == 1 and v["n"] >= 2}
    return pd.DataFrame({"stream": list(one), "deliveries": [v["n"] for v in one.values()],
                         "consumer_tag": [next(iter(v["tags"])) for v in one.values()],
                         "per_s_active": [(v["n"] - 1) / float(v["last"] - v["first"]) for v in one.values()],
                         "per_capture_s": [v["n"] / capture_s for v in one.values()]}), capture_s


class _Tables(HTMLParser):
    """report.html's tables with a header: per table, its header cells' titles (the column
    names; the text when untitled) and its body rows' cell texts."""

    def __init__(self):
        super().__init__()
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self._cell: list[str] | None = None
        self._title = None

    def handle_starttag(self, tag, attrs):
        if tag == "thead":
            self.tables.append(([], []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell, self._title = [], dict(attrs).get("title")

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "thead" and self.tables:
            self.tables[-1][1].clear()  # (the header's row)
        elif tag in ("td", "th") and self._cell is not None and self.tables:
            head, rows = self.tables[-1]
            if tag == "th" and not rows[1:] and not any(rows):
                head.append(self._title or "".join(self._cell))
            else:
                rows[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._cell = None


def _html_tables(path: Path) -> list[pd.DataFrame]:
    p = _Tables()
    p.feed(path.read_text())
    return [pd.DataFrame([r for r in rows if len(r) == len(head)], columns=head)
            for head, rows in p.tables if head and any(len(r) == len(head) for r in rows)]


def _shown_close(cell: str, want: float) -> bool:
    """Whether a report cell ("1,234.5") is `want` as printed with the cell's decimals."""
    decimals = len(cell.split(".")[1]) if "." in cell else 0
    return abs(float(cell.replace(",", "")) - want) <= 0.5 * 10 ** -decimals * (1 + 1e-9)


@pytest.fixture(scope="module", params=one_fast(CAPTURES, keep="sample.pcap"), ids=lambda p: p.name)
def analysed(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("rates") / "out"
    r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(request.param), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    want, capture_s = expected(request.param)
    assert len(want), "a stream with one consumer and deliveries"
    return out, want, capture_s


def test_one_delivery_rate_in_every_table_and_summary(analysed):
    out, want, capture_s = analysed
    overview = json.loads((out / "summary.json").read_text())["overview"]
    assert overview["duration_s"] == pytest.approx(capture_s, rel=1e-12)
    consumers = pd.read_csv(out / "consumers-consumers.csv")
    latency = pd.read_csv(out / "latency-consumers.csv")
    clients = pd.read_csv(out / "clients-connections.csv").set_index("stream")
    for w in want.itertuples():
        def row(df):
            mine = df[(df["stream"] == w.stream) & (df["consumer_tag"] == w.consumer_tag)]
            assert len(mine) == 1, (w.stream, w.consumer_tag)
            return mine.iloc[0]

        # the same number, the expected one, everywhere (CSV and JSON keep 12 significant digits)
        assert row(consumers)["deliveries"] == w.deliveries
        assert row(consumers)["delivered_msgs_per_s"] == pytest.approx(w.per_s_active, rel=1e-9)
        assert row(latency)["delivered_msgs_per_s"] == pytest.approx(w.per_s_active, rel=1e-9)
        assert clients.loc[w.stream, "delivered_msgs_per_s"] == pytest.approx(w.per_s_active, rel=1e-9)
        o = row(pd.DataFrame(overview["consumers"]))
        assert o["delivered"] == w.deliveries
        assert o["delivered_msgs_per_s"] == pytest.approx(w.per_s_active, rel=1e-9)
        assert o["delivered_msgs_per_capture_s"] == pytest.approx(w.per_capture_s, rel=1e-9)
        assert row(consumers)["delivered_msgs_per_s"] == row(latency)["delivered_msgs_per_s"] \
            == clients.loc[w.stream, "delivered_msgs_per_s"] == o["delivered_msgs_per_s"]


def test_report_tables_show_the_rate_with_its_span_and_one_precision_per_column(analysed):
    out, want, _ = analysed
    labels = pd.read_csv(out / "consumers-consumers.csv").set_index("stream")["connection"]
    tables = _html_tables(out / "report.html")
    from amqpcap.report.html import ACTIVE_RATE_HEADER, CAPTURE_RATE_HEADER

    active = {"delivered_msgs_per_s", ACTIVE_RATE_HEADER["delivered"]}
    seen = {"active": 0, "capture": 0}
    for t in tables:
        for col in t.columns:
            if col not in active and col != CAPTURE_RATE_HEADER["delivered"]:
                continue
            kind = "active" if col in active else "capture"
            cells = [c for c in t[col] if c]
            # one precision per column: every number of it with the same decimals
            assert len({len(c.split(".")[1]) if "." in c else 0 for c in cells}) <= 1, (col, cells)
            for w in want.itertuples():
                if "stream" in t.columns:
                    mine = t[t["stream"] == str(w.stream)]
                else:  # the overview's consumers, named by connection
                    mine = t[t.iloc[:, 0].isin([labels.get(w.stream, "")])]
                for cell in mine[col]:
                    assert _shown_close(cell, w.per_s_active if kind == "active" else w.per_capture_s), \
                        (col, w.stream, cell)
                    seen[kind] += 1
    # the consumers, latency and clients tables, the overview's and a finding's "Who" table
    assert seen["active"] >= 4 * len(want) and seen["capture"] >= len(want), seen


def test_report_numbers_have_one_precision_per_column(analysed):
    """Every column of every table in report.html prints its numbers with one number of decimals
    (144.3 beside 144.0, never beside 144)."""
    out, _, _ = analysed
    for t in _html_tables(out / "report.html"):
        for col in t.columns:
            cells = [c.rstrip("%") for c in t[col] if c]
            numbers = [c for c in cells if c.replace(",", "").replace(".", "", 1).lstrip("-").isdigit()]
            if len(numbers) < len(cells) or not numbers:
                continue  # (text, or text and numbers: a label column, "no-ack")
            assert len({len(c.split(".")[1]) if "." in c else 0 for c in numbers}) == 1, (col, numbers)


def test_the_definitions_by_hand():
    """3 messages in 2 s are 2 intervals: 1 msg/s active; over a 4 s capture, 0.75 msg/s. One
    message has no rate active; a capture without duration none at all."""
    from amqpcap.derive.rates import msgs_per_capture_s, msgs_per_s_active

    t0 = pd.Timestamp("2026-01-01T00:00:00Z")
    got = msgs_per_s_active([3, 1, 2, 0], pd.Series([t0, t0, t0, pd.NaT]),
                            pd.Series([t0 + pd.Timedelta(seconds=2), t0, t0, pd.NaT]))
    assert got[0] == 1.0 and pd.isna(got[1:]).all()
    ns = t0.value
    assert msgs_per_s_active([3], [ns], [ns + 2 * 10**9])[0] == 1.0  # (nanoseconds, as the clients count them)
    assert msgs_per_capture_s(3, 4.0) == 0.75 and msgs_per_capture_s(3, 0.0) is None
