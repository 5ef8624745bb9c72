"""report.html: one self-contained page read in two minutes.

Top: what happened (the overview: a paragraph, the verdict and small tables), then the findings
(who, the Wireshark filter, what to try). Everything else is collapsed (<details>): connections,
methods, anomalies, and per analyzer its plots and tables, each table cut to a few rows and its
key columns (names first) with a link to the full file written beside the report. No script, no
external resource: plots are embedded as data URIs, so the page works offline."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.registry import AnalyzerResult, Plot
from ..io.kept_rows import top_rows
from ..summary.prepared import Prepared
from .rates_plot import rates_png
from ..model.written_values import PER_S_ACTIVE, iso_utc
from ..model.wording import counted, frames_counted

#: rows of a table shown in the page (all of them are in the file beside it)
MAX_ROWS = 10
#: columns of a table shown in the page: the key ones, names first
MAX_COLS = 9
#: subjects of a finding listed in its card
MAX_SUBJECTS = 10
#: columns of a finding's subject table
MAX_SUBJECT_COLS = 8

#: per table (`<analyzer>/<table>`): the columns shown, in order, and the order of the rows
#: shown ((column, descending) or None: the table's own order). ``connection`` is the
#: connection's label, added from ``stream``. Columns a table does not have are skipped.
KEY_COLUMNS: dict[str, tuple[list[str], tuple[str, bool] | None]] = {
    "consumers/consumers": (["connection", "queue", "deliveries", "delivered_msgs_per_s", "prefetch", "share_at_limit",
                             "deliver_to_ack_p50_s", "backlog_growth_msgs", "stream"], None),
    "consumers/state": (["connection", "ts", "unacked", "prefetch", "deficit", "at_limit", "duration_s", "packet",
                         "stream"], None),
    "latency/consumers": (["connection", "queue", "deliveries", "delivered_msgs_per_s", "deliver_to_ack_p50_s",
                           "deliver_to_ack_p99_s", "ack_to_next_deliver_p50_s", "redelivered", "stream"], None),
    "latency/deliveries": (["connection", "queue", "ts", "latency_s", "outcome", "redelivered", "packet",
                            "settle_packet", "stream"], None),
    "latency/ack-gaps": (["connection", "queue", "ts", "gap_s", "method", "settled", "backlog_min", "packet",
                          "stream"], ("gap_s", True)),
    "latency/confirms": (["connection", "ts", "seq", "latency_s", "outcome", "packet", "confirm_packet", "stream"],
                         ("latency_s", True)),
    "latency/interleaving": (["connection", "delivers", "acks", "runs", "alternation_ratio", "max_deliver_run",
                              "max_ack_run", "stream"], None),
    "clients/connections": (["connection", "client", "publish_rate_per_s", "delivered_msgs_per_s", "get_rate_per_s",
                             "tx_commits", "confirm_selects", "stream"], ("publishes", True)),
    "clients/returns": (["connection", "exchange", "routing_key", "returns", "publishes", "reply_text", "stream"],
                        ("returns", True)),
    "clients/cancels": (["connection", "queue", "ts", "resubscribed", "deleted_by", "packet", "stream"], None),
    "clients/confirming": (["connection", "publishes", "sequential_share", "waiting_share", "confirm_latency_p50_s",
                            "published_msgs_per_s", "stream"], ("waiting_share", True)),
    "heartbeats/connections": (["connection", "heartbeat_s", "problem", "c2s_longest_silence_s", "s2c_longest_silence_s",
                                "ended_by", "silence_before_end_s", "stream"], ("silence_before_end_s", True)),
    "messages/large": (["connection", "direction", "ts", "body_size", "body_frames", "refused", "max_message_size", "transfer_s",
                        "packet", "stream"], ("body_size", True)),
    "messages/connections": (["stream", "messages_c2s", "messages_s2c", "body_bytes_p50", "body_bytes_max",
                              "large_messages_c2s", "large_messages_s2c", "refused_messages"], ("body_bytes_max", True)),
    "nagle/directions": (["connection", "direction", "data_segments", "small_share", "packets_saved", "stalls",
                          "median_stall_s", "stream"], ("data_segments", True)),
    "nagle/stalls": (["connection", "direction", "ts", "stall_s", "ack_delay_s", "payload_bytes", "packet", "stream"],
                     ("stall_s", True)),
    "sizes/packet-sizes": (["connection", "direction", "range", "count", "percent", "stream"], None),
    "sizes/payload-sizes": (["connection", "direction", "segments", "p50_bytes", "p90_bytes", "max_bytes", "stream"],
                            ("segments", True)),
    "sizes/frames-per-packet": (["connection", "direction", "frames_per_packet", "packets", "stream"],
                                ("packets", True)),
    "sizes/packets-per-frame": (["connection", "direction", "type", "packets_per_frame", "frames", "stream"],
                                ("frames", True)),
    "sizes/throughput": (["start_s", "direction", "mbit_s", "packets_s", "published_msgs_s", "delivered_msgs_s",
                          "acked_msgs_s"], ("mbit_s", True)),
    "stalls/stalls": (["connection", "direction", "cause", "duration_s", "start_ts", "detail", "first_packet",
                       "stream"], ("duration_s", True)),
    "stalls/tcp": (["connection", "direction", "data_packets", "retransmissions", "zero_window_ads",
                    "window_full_segments", "rtt_p50_s", "stall_total_s", "stream"], None),
    "connections": (["connection", "client", "user@vhost", "role", "stream", "client_endpoint", "packets", "frames",
                     "duration_s", "anomalies"], ("packets", True)),
    "anomalies": (["kind", "connection", "direction", "packet", "bytes", "detail", "stream"], None),
}
#: columns that name something: shown first when a table has no entry above
NAME_COLUMNS = ("connection", "consumer", "queue", "exchange", "routing_key", "kind", "cause", "direction", "method")

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em auto;max-width:1200px;color:#222;padding:0 1em;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin:1.4em 0 .5em}
h3{font-size:1.05em;margin:.3em 0}
.meta,.note{color:#555;font-size:.9em}
.verdict{border-left:6px solid #27ae60;background:#f3faf5;padding:.6em 1em;font-size:1.1em;margin:.8em 0}
.verdict.critical{border-color:#c0392b;background:#fdf2f1}.verdict.warning{border-color:#e6a700;background:#fffaeb}
.verdict.info{border-color:#2e86c1;background:#f0f7fc}
.story{font-size:1.05em}
.cols{display:flex;flex-wrap:wrap;gap:0 2em;align-items:flex-start}.cols>div{flex:1 1 420px;min-width:0}.cols table{width:100%}
.finding{border-left:6px solid #999;padding:.5em 1em;margin:.8em 0;background:#fafafa}
.critical{border-color:#c0392b}.warning{border-color:#e6a700}.info{border-color:#2e86c1}
.sev{font-weight:bold;text-transform:uppercase;font-size:.8em}.critical .sev{color:#c0392b}.warning .sev{color:#b07d00}.info .sev{color:#2e86c1}
code{background:#f0f0f0;padding:.1em .3em;border-radius:3px;overflow-wrap:anywhere}
pre.filter{background:#f3f3f3;border:1px solid #ddd;padding:.4em .6em;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere;user-select:all;cursor:text;margin:.2em 0;max-height:7.5em;overflow-y:auto}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0;max-width:100%}
td,th{border:1px solid #ddd;padding:.15em .45em;text-align:right;vertical-align:top}
td.t{overflow-wrap:break-word}td.t:first-child{min-width:13em}.tw{overflow-x:auto;max-width:100%}td:not(.t){white-space:nowrap}
th{background:#f0f0f0;font-weight:600}td.t,th.t{text-align:left}
.evidence th,.evidence td{text-align:left}.evidence th{font-weight:normal;color:#555}
details{margin:.3em 0;border:1px solid #e4e4e4;border-radius:4px;padding:.2em .8em}
details[open]{padding-bottom:.6em}summary{cursor:pointer;font-weight:600;padding:.2em 0}
summary .note{font-weight:normal}
details details{border:none;padding:0 0 0 .4em}
img{max-width:100%;height:auto;border:1px solid #eee;margin:.4em 0;display:block}
"""


# --- values -----------------------------------------------------------------------------------

def _num(v: float) -> str:
    """A number for a table cell: at most 4 significant digits, no exponent, thousands grouped."""
    if not math.isfinite(v):
        return ""
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{_four_digits_decimals(v)}f}".rstrip("0").rstrip(".")


def _four_digits_decimals(v: float) -> int:
    """The decimals that give `v` 4 significant digits (none from 1,000 up), at most 9."""
    return min(max(0, 3 - math.floor(math.log10(abs(v)))), 9) if v else 0


def _decimals(values) -> int | None:
    """One number of decimals for a table column's floats (`_html_table`), so that its numbers
    line up (144.3 beside 144.0, not beside 144): as many as give its largest absolute value 4
    significant digits (none from 1,000 up), at most 9; None when every value is whole (printed
    as integers) or none is finite."""
    v = np.array([float(x) for x in values if isinstance(x, (float, np.floating, int, np.integer))
                  and not isinstance(x, (bool, np.bool_))], dtype=float)
    v = v[np.isfinite(v)]
    if not len(v) or (v == np.round(v)).all():
        return None
    return _four_digits_decimals(float(np.abs(v).max()))


def _share_decimals(values) -> int:
    """One number of decimals for a column of shares shown as percentages: 1 when one of them is
    below 10 % (and not 0), else 0."""
    v = np.array([float(x) for x in values if isinstance(x, (float, np.floating))], dtype=float)
    v = np.abs(v[np.isfinite(v)])
    return 1 if ((v > 0) & (v < 0.1)).any() else 0


def _is_share(key: str) -> bool:
    """Columns and evidence keys holding a share of 1 (shown as a percentage)."""
    return key.startswith("share") or key.endswith("_share") or key == "utilisation"


def _value(v: Any, key: str = "", decimals: int | None = None) -> str:
    """A value as a cell or an evidence line shows it; `decimals`: its table column's
    (`_decimals`, `_share_decimals`), else the value's own (`_num`)."""
    if key and _is_share(key) and isinstance(v, (float, np.floating)) and math.isfinite(v):
        if decimals is not None:
            return f"{v:.{decimals}%}"
        return f"{v:.1%}" if v < 0.1 else f"{v:.0%}"
    if v is None or v is pd.NA or v is pd.NaT:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if decimals is not None and math.isfinite(v):
            return f"{float(v):,.{decimals}f}"
        return _num(float(v))
    if isinstance(v, pd.Timestamp):  # the one format of every output (ISO 8601 UTC, Z)
        return iso_utc(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items())
    return str(v)


def _header(col: str) -> str:
    """A column's header: its name spaced, a rate's span said (`amqpcap.derive.rates`); the name
    itself as its title."""
    text = col.replace("_", " ")
    if col in PER_S_ACTIVE:
        text = text.replace("per s", "per s active")
    elif col.endswith("_msgs_per_capture_s"):
        text = text.removesuffix("capture s") + "s of capture"
    return f'<th title="{html.escape(col)}">{html.escape(text)}</th>'


def _column_decimals(df: pd.DataFrame, c) -> int | None:
    """The decimals of column `c`'s numbers (`_decimals`; shares: `_share_decimals`)."""
    values = df[c].tolist()
    return _share_decimals(values) if _is_share(str(c)) else _decimals(values)


def _html_table(df: pd.DataFrame, cls: str = "") -> str:
    """Cells formatted by _value, each column's numbers with one number of decimals
    (`_column_decimals`); text columns left-aligned."""
    text = [c for c in df.columns if not (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c])
                                          or pd.api.types.is_datetime64_any_dtype(df[c]))]
    head = "".join(_header(c).replace("<th ", '<th class="t" ', 1) if c in text else _header(c) for c in df.columns)
    decimals = [_column_decimals(df, c) for c in df.columns]
    body = "".join("<tr>" + "".join(f'<td{" class=t" if c in text else ""}>{html.escape(_value(v, str(c), d))}</td>'
                                    for c, v, d in zip(df.columns, row, decimals)) + "</tr>"
                   for row in df.itertuples(index=False, name=None))
    # (the wrapper scrolls a table sideways only if a single word is wider than the page)
    return f'<div class="tw"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


# --- tables -----------------------------------------------------------------------------------

def _key_columns(key: str, df: pd.DataFrame) -> list[str]:
    """The columns to show: the table's own list (KEY_COLUMNS), else name columns first; filled up
    to MAX_COLS with the others in the table's order."""
    wanted = KEY_COLUMNS.get(key, ([], None))[0] or [c for c in NAME_COLUMNS if c in df.columns]
    cols = [c for c in wanted if c in df.columns]
    if len(cols) < 4:
        cols += [c for c in df.columns if c not in cols][:MAX_COLS - len(cols)]
    return cols[:MAX_COLS]


def _with_connection(labels: pd.Series, df: pd.DataFrame) -> pd.DataFrame:
    """``connection`` (the label, from `labels` by stream) from ``stream``, when the table has a
    stream but no label."""
    if "stream" not in df.columns or "connection" in df.columns:
        return df
    return df.assign(connection=df["stream"].astype(object).map(labels).fillna("").to_numpy(object))  # (NA: no stream)


def _file_link(out: Path, stem: str) -> str:
    for ext in ("csv", "parquet"):
        if (out / f"{stem}.{ext}").exists():
            return f'<a href="{html.escape(stem)}.{ext}">{html.escape(stem)}.{ext}</a>'
    return ""


def _table(labels: pd.Series, key: str, df, link: str) -> str:
    """A few rows (MAX_ROWS) of the key columns, and what was left out with the file holding it
    (`df`: a DataFrame, or rows kept on the workers: `amqpcap.io.kept_rows`)."""
    order = KEY_COLUMNS.get(key, ([], None))[1]
    if order and order[0] in df.columns and len(df) > MAX_ROWS:
        rows = top_rows(df, MAX_ROWS, order[0], largest=order[1])
        which = f"the {MAX_ROWS} with the {'largest' if order[1] else 'smallest'} {order[0]}"
    else:
        rows, which = top_rows(df, MAX_ROWS), f"the first {MAX_ROWS}"
    rows = _with_connection(labels, rows)
    cols = _key_columns(key, rows)
    shown = [f"{which} of {len(df):,} rows"] if len(df) > MAX_ROWS else []
    hidden = len([c for c in df.columns if c not in cols])
    if hidden:
        shown.append(f"{len(df.columns) - hidden} of {len(df.columns)} columns")
    note = ("Showing " + " and ".join(shown) if shown else "All rows") + (f"; every row and column: {link}" if link else "")
    note = f"<p class='note'>{note}.</p>"
    return _html_table(rows[cols]) + note


def _details(summary: str, body: str, note: str = "", open_: bool = False) -> str:
    n = f' <span class="note">{html.escape(note)}</span>' if note else ""
    return f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}{n}</summary>{body}</details>"


# --- top of the page --------------------------------------------------------------------------

def _rate(v) -> float:
    return math.nan if v is None else float(v)


#: the overview tables' rate headers, each naming its span (`amqpcap.derive.rates`)
CAPTURE_RATE_HEADER = {k: f"{k} per s of capture" for k in ("published", "delivered", "acked")}
ACTIVE_RATE_HEADER = {"delivered": "delivered per s active"}


def _overview(prepared: Prepared, o: dict[str, Any]) -> str:
    """The verdict (the worst problem, or "no problem found": info notes are never the verdict),
    the story and small tables: queues, consumers, publishes not routed to a queue."""
    v = o["verdict"]
    sev = v["severity"] or "ok"
    links = [f'<a href="#{anchor}">{counted(n, noun)} below</a>'
             for anchor, noun, n in (("findings", "finding", v["problems"]), ("notes", "note", v["notes"])) if n]
    more = (" " + ", ".join(links)) if links else ""
    parts = [f'<div class="verdict {sev}"><span class="sev">{html.escape(sev)}</span> {html.escape(v["text"])}{more}</div>',
             f'<p class="story">{html.escape(o["story"])}</p>']
    png = rates_png(prepared.rate_bins)
    if png:
        parts.append(f'<img class="rates" alt="messages per second over time" '
                     f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    cols = []
    if o["queues"]:
        q = pd.DataFrame([{"queue": r["queue"], CAPTURE_RATE_HEADER["published"]: _rate(r["published_msgs_per_capture_s"]),
                           CAPTURE_RATE_HEADER["delivered"]: _rate(r["delivered_msgs_per_capture_s"]),
                           CAPTURE_RATE_HEADER["acked"]: _rate(r["acked_msgs_per_capture_s"]),
                           "growth (msgs)": "unknown" if r["growth_msgs"] is None else f"≥ {r['growth_msgs']:,}"}
                          for r in o["queues"]])
        unknown = sorted({r["growth_basis"] for r in o["queues"] if r["growth_msgs"] is None})
        cols.append("<h3>Queues</h3>" + _html_table(q) + "<p class='note'>messages per s of capture; growth: "
                    "published into the queue minus delivered, a lower bound (summary.json says how each was "
                    "inferred)." + "".join(f" Unknown: {html.escape(u)}." for u in unknown) + "</p>")
    if o["consumers"]:
        rows = o["consumers"]
        labels, queue = prepared.consumer_labels
        acked = [_rate(r["acked_msgs_per_capture_s"]) for r in rows]
        d = _decimals(acked)  # (the column's one precision, though it also holds text)
        c = pd.DataFrame({"connection" if queue else "consumer": labels,
                          CAPTURE_RATE_HEADER["delivered"]: [_rate(r["delivered_msgs_per_capture_s"]) for r in rows],
                          ACTIVE_RATE_HEADER["delivered"]: [_rate(r["delivered_msgs_per_s"]) for r in rows],
                          CAPTURE_RATE_HEADER["acked"]: ["no-ack" if r["no_ack"] else _value(a, decimals=d)
                                                   for r, a in zip(rows, acked)],
                          "prefetch": [math.nan if r["prefetch"] is None else float(r["prefetch"]) for r in rows]})
        more = o["consumers_total"] - len(rows)
        title = f"Consumers of queue {html.escape(queue)}" if queue else "Consumers"
        cols.append(f"<h3>{title}</h3>" + _html_table(c)
                    + "<p class='note'>messages per s of capture (a queue's consumers add up to its rate) and per s "
                      "active: from the consumer's first delivery to its last"
                    + (f"; the {len(rows)} busiest of {o['consumers_total']:,}, every one in "
                       "consumers-consumers.csv and latency-consumers.csv" if more > 0 else "") + "</p>")
    unrouted = [p for p in o["publishes"] if not p["queues"]]
    if unrouted:
        p = pd.DataFrame([{"exchange": r["exchange"] or "(default)", "routing key": r["routing_key"],
                           CAPTURE_RATE_HEADER["published"]: _rate(r["published_msgs_per_capture_s"])} for r in unrouted])
        cols.append("<h3>Publishes the capture does not route to a queue</h3>" + _html_table(p)
                    + "<p class='note'>no queue.bind for them in the capture</p>")
    if cols:
        parts.append('<div class="cols">' + "".join(f"<div>{x}</div>" for x in cols) + "</div>")
    return "<section id='overview'><h2>What happened</h2>" + "".join(parts) + "</section>"


def _subjects(subjects: list[dict[str, Any]]) -> str:
    """A finding's subjects: names first, then their own numbers, stream last; the first few."""
    if not subjects:
        return ""
    df = pd.DataFrame(subjects[:MAX_SUBJECTS])
    skip = {"stream", "channel", "consumer_tag", "severity"}
    names = [c for c in df.columns if c not in skip and df[c].map(lambda x: isinstance(x, str)).all()]
    numbers = [c for c in df.columns if c not in skip and c not in names
               and not df[c].map(lambda x: isinstance(x, (bool, np.bool_)) and not x).all()]  # (all-false flags)
    cols = (names + numbers)[:MAX_SUBJECT_COLS - 1] + ["stream"]
    more = len(subjects) - MAX_SUBJECTS
    note = f"<p class='note'>+{more:,} more in summary.json</p>" if more > 0 else ""
    return _html_table(df[[c for c in cols if c in df.columns]]) + note


def _files_note(files: list[dict]) -> str:
    """For a set of files (a tcpdump ring): how many, merged by time, first and last."""
    read = [f for f in files if not f["skipped"]]
    if len(files) < 2:
        return ""
    names = f"{html.escape(Path(read[0]['name']).name)} … {html.escape(Path(read[-1]['name']).name)}" if read else ""
    skipped = len(files) - len(read)
    return (f"; read from {len(read)} files merged by time ({names})"
            + (f", {skipped} skipped (see the warnings)" if skipped else ""))


def _explains(f: dict[str, Any]) -> str:
    """What a finding explains (consequences folded into it: amqpcap/analysis/consequences.py), in words."""
    items = [f"<li><code>{html.escape(e['finding'])}</code> on {html.escape(counted(len(e['streams']), 'connection'))} "
             f"(tcp.stream {html.escape(', '.join(map(str, e['streams'][:10])))}{', …' if len(e['streams']) > 10 else ''}): "
             f"{html.escape(e['why'])}</li>" for e in f["evidence"].get("explains", [])]
    return f"<p><b>Also explains</b> (not a separate problem):</p><ul>{''.join(items)}</ul>" if items else ""


def _filter_note(f: dict[str, Any], out: Path | None) -> str:
    """What a finding's filter leaves out (`filter_covers`), with the file listing every
    connection when there is one (`amqpcap.report.outputs.write_finding_streams`)."""
    covers = f["evidence"].get("filter_covers")
    if not covers:
        return ""
    from .file_names import finding_streams_file

    name = finding_streams_file(f["id"])
    every = (f'; every connection in <a href="{html.escape(name)}">{html.escape(name)}</a>'
             if out is not None and (out / name).exists() else "")
    return f" <span class='note'>(filter: {html.escape(covers)}{every})</span>"


def _finding(f: dict[str, Any], out: Path | None = None) -> str:
    evidence = {k: v for k, v in f["evidence"].items() if k not in ("filter", "explains")}
    flt = f["evidence"].get("filter", "")
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td class=t>{html.escape(_value(v, k))}</td></tr>"
                   for k, v in evidence.items())
    who = f.get("subjects") or []
    return (
        f'<div class="finding {f["severity"]}"><span class="sev">{f["severity"]}</span> '
        f'<code>{html.escape(f["id"])}</code><h3>{html.escape(f["title"])}</h3>'
        + (f"<b>Who</b> ({counted(len(who), 'subject')}):" + _subjects(who) if who else "")
        + _explains(f)
        + f'<p><b>What to try:</b> {html.escape(f.get("advice", ""))}</p>'
        + (f'<div>Wireshark display filter (click to select){_filter_note(f, out)}:<pre class="filter">'
           f'{html.escape(flt)}</pre></div>' if flt else "")
        + _details("Evidence", f'<table class="evidence">{rows}</table>', "the numbers behind it")
        + "</div>"
    )


def _redacted(r: dict[str, Any]) -> str:
    """What this report (and every table beside it) leaves out, with the counts."""
    items = [
        f"{r['sasl_responses']:,} SASL responses (connection.start-ok, connection.secure-ok: they carry the "
        "password) and {0:,} SASL challenges (connection.secure): never decoded, only the mechanism and, "
        "for PLAIN and AMQPLAIN, the user name are shown".format(r["sasl_challenges"]),
        f"{r['update_secrets']:,} new secrets of connection.update-secret: never decoded, only the reason is shown",
    ]
    if r["bodies_kept"]:
        items.append(f"message bodies were kept on request (--bodies): {r['body_bytes_kept']:,} of "
                     f"{r['body_bytes_seen']:,} body bytes, in the bodies table beside this report (not in it)")
    else:
        items.append(f"message bodies were not kept ({r['body_bytes_seen']:,} body bytes seen): only their sizes "
                     "are shown; amqpcap analyze --bodies keeps them")
    return _details("Redacted", "<ul class='note'>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>",
                    "what no output holds")


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _drawn(r: AnalyzerResult, out: Path) -> list[tuple[Plot, Path]]:
    """An analyzer's plots that were drawn (a plot without data has no file), with their files."""
    return [(p, png) for p, png in ((p, out / f"{p.name}.png") for p in r.plots) if png.exists()]


def _shows_something(r: AnalyzerResult, out: Path) -> bool:
    """Whether an analyzer has a plot drawn or a table row: one without either (the amqp10
    analyzer on a capture without AMQP 1.0) gets no section, only its name in the Details intro."""
    return bool(_drawn(r, out)) or any(len(df) for df in r.tables.values())


def _analyzer(prepared: Prepared, r: AnalyzerResult, out: Path) -> str:
    """An analyzer's plots (those drawn) and tables, collapsed."""
    plots = _drawn(r, out)
    body = "".join(f"<h3>{html.escape(p.title)}</h3>{_img(png, p.title)}" for p, png in plots)
    tables = {name: df for name, df in r.tables.items() if len(df)}
    body += "".join(_details(f"table {name}", _table(prepared.labels, f"{r.name}/{name}", df, _file_link(out, f"{r.name}-{name}")),
                             f"{len(df):,} rows") for name, df in tables.items())
    empty = [name for name in r.tables if name not in tables]
    if empty:
        body += f"<p class='note'>Empty in this capture: {html.escape(', '.join(empty))}.</p>"
    what = prepared.analyzer_help.get(r.name, "")  # the analyzer's one-line help
    note = ", ".join(x for x in (counted(len(plots), "plot") if plots else "",
                                 counted(len(tables), "table") if tables else "") if x)
    what = what.rstrip(".")
    return _details(r.name, body, f"{what} ({note})" if what and note else what or note)


def _base_tables(prepared: Prepared, out: Path) -> list[str]:
    conns, summary, anomalies = prepared.connections, prepared.summary, prepared.anomalies
    parts = [_details("Connections", _table(prepared.labels, "connections", conns, _file_link(out, "connections")),
                      f"{len(conns):,}: who they are, role, packets")]
    methods = pd.DataFrame(list(summary["methods"].items()), columns=["method", "frames"])
    if len(methods) or not summary["capture"]["amqp10_frames"]:  # (1.0 only: its performatives are amqp10's)
        parts.append(_details("Methods", _html_table(methods), f"{len(methods):,} kinds of AMQP 0-9-1 method frame"))
    if len(anomalies):
        parts.append(_details("Anomalies", "<p class='note'>What was not decoded, and why.</p>"
                              + _table(prepared.labels, "anomalies", anomalies, _file_link(out, "anomalies")),
                              f"{len(anomalies):,}"))
    return parts


def write_report(prepared: Prepared, results: list[AnalyzerResult], out: Path) -> Path:
    """Write out/report.html from what `prepared` holds. Plots and tables must already be in
    `out` (`amqpcap.report.outputs.write_outputs` writes them first)."""
    summary = prepared.summary
    c, o = summary["capture"], summary["overview"]
    name = html.escape(Path(c["path"]).name)
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>amqpcap: {name}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>amqpcap report: {name}</h1>",
        f"<p class='meta'>{c['packets']:,} packets ({c['format']}{', gzip' if c['compressed'] else ''}, "
        f"{', '.join(c['link_types'])}), {counted(c['connections'], 'AMQP connection')}, {frames_counted(c)}, "
        f"{c['duration_s']:.3f} s from {html.escape(iso_utc(c['first_ts']) if c['first_ts'] else '')}"
        f"{_files_note(c.get('files', []))}.</p>",
    ]
    if c["warnings"]:
        parts.append("<p><b>Warnings:</b> " + "; ".join(html.escape(w) for w in c["warnings"]) + "</p>")
    parts.append(_overview(prepared, o))
    problems = [f for f in summary["findings"] if f["severity"] != "info"]
    notes = [f for f in summary["findings"] if f["severity"] == "info"]
    parts.append(f"<section id='findings'><h2>Findings ({len(problems)})</h2>")
    if problems:
        parts += [_finding(f, out) for f in problems]
    else:
        parts.append("<p>No problem found: nothing in this capture crossed a warning threshold (docs/findings.md)."
                     + (" The notes below are worth knowing, not problems on their own." if notes else "") + "</p>")
    if notes:
        parts.append(f"</section><section id='notes'><h2>Notes ({len(notes)})</h2>")
        parts += [_finding(f, out) for f in notes]
    links = [x for x in (_file_link(out, s) for s in ("frames", "packets")) if x]
    parts.append("</section><h2>Details</h2><p class='note'>Click to open. Tables show a few rows and their key "
                 "columns; the files beside this report hold every row and column"
                 + (f" (every frame and packet: {', '.join(links)})" if links else "") + "."
                 + (f" Nothing to show in this capture: {html.escape(', '.join(r.name for r in silent))}."
                    if (silent := [r for r in results if not _shows_something(r, out)]) else "") + "</p>")
    parts += _base_tables(prepared, out)
    parts += [_analyzer(prepared, r, out) for r in results if _shows_something(r, out)]
    parts.append(_redacted(summary["redacted"]))
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
