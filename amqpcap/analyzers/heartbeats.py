"""heartbeats: the heartbeat timeout each connection negotiated, how long each side went silent,
and connections dropped because a side missed its heartbeats (issue 14, `heartbeat-problems`).

AMQP 0-9-1 §4.2.7: a peer that receives no octet for two heartbeat intervals may treat the
connection as dead and close its socket without a connection.close. RabbitMQ does exactly that
(its heartbeats guide: "after two missed heartbeats, the peer is considered to be unreachable")
and sends its own heartbeat every half interval. So the signature on the wire is one side silent
(no TCP payload at all: any frame resets the timer, not only heartbeat frames) for two intervals
or more, then the other side ending the TCP connection (FIN or RST) without a connection.close.

Everything is per connection: the step measures each connection of its rows (the state carries
what a slice of time leaves to the next, `_Seen`), a partition closes as one row per connection,
and the finish joins the rows and derives the finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analysis.registry import AnalyzerResult, Finding, analyzer
from ..io.load import Capture
from ..derive.methods import methods, select
from ..derive.labels import connection_labels
from ..model.display_filters import filter_evidence, streams_part
from ..derive.names import amqp091_rows, worst_first
from ..analysis.contract import Analyzer
from ..io.rows import merge_rows
from ..model.facts import CaptureFacts
from ..model.wording import counted

#: heartbeat-problems: a negotiated timeout below this is told (info): RabbitMQ's heartbeats
#: guide: values below 5 seconds are fairly likely to cause false positives (network congestion,
#: GC pauses); 5 to 20 seconds is the sane range it recommends
HEARTBEAT_LOW_S = 5
#: a side silent for this many negotiated intervals, then the connection ended by the other side
#: without connection.close, was dropped for missed heartbeats (AMQP 0-9-1 §4.2.7; RabbitMQ
#: closes after two missed): warning
MISSED_INTERVALS = 2
#: TCP flags (docs/tables.md, `flags`)
FIN, RST = 0x01, 0x04
#: what a subject's `problem` says, worst first
PROBLEMS = ("missed-heartbeats", "heartbeat-low", "heartbeat-disabled")
#: how a title counts each problem
WORDS = dict(zip(PROBLEMS, ("dropped", "below 5 s", "disabled")))
FILTER = "(amqp.type == 8 || tcp.flags.fin == 1 || tcp.flags.reset == 1 || " \
         "(amqp.method.class == 10 && amqp.method.method in {30, 31, 50, 51}))"
COLUMNS = ["stream", "connection", "heartbeat_s", "c2s_longest_silence_s", "s2c_longest_silence_s",
           "ended_by", "end_packet", "end_ts", "closed_with_amqp", "silent_side", "silence_before_end_s",
           "heartbeat_frames_c2s", "heartbeat_frames_s2c", "problem"]


@dataclass
class _Seen:
    """What a partition's packets so far tell of each of its connections (arrays by the sorted
    connections' `stream`): the analyzer's state, carried from one slice of its time to the next,
    or made from the partition at once."""

    #: the first FIN or RST of either side: its packet (-1: none yet), ts (ns), and whether the
    #: client sent it
    end_packet: np.ndarray
    end_ts: np.ndarray
    end_c2s: np.ndarray
    #: per direction: the latest payload's ts (`_NONE`: none yet) and the longest time between two
    #: payloads so far (ns); payloads after the connection's end do not count
    last: dict[str, np.ndarray]
    longest: dict[str, np.ndarray]
    #: per direction: a connection.close sent, heartbeat frames sent
    closed: dict[str, np.ndarray]
    heartbeat_frames: dict[str, np.ndarray]

    @classmethod
    def nothing(cls, n: int) -> "_Seen":
        def each(value, dtype):
            return {d: np.full(n, value, dtype) for d in DIRECTIONS}

        return cls(np.full(n, -1, np.int64), np.zeros(n, np.int64), np.zeros(n, bool), each(_NONE, np.int64),
                   each(0, np.int64), each(False, bool), each(0, np.int64))


DIRECTIONS = ("c2s", "s2c")
_NONE = np.iinfo(np.int64).min


def _seen(cap: Capture, seen: _Seen | None) -> _Seen:
    """`seen` (None: nothing yet) with the packets and frames of `cap` (the partition, or its next
    slice of time) added."""
    stream = cap.connections["stream"].to_numpy(np.int64)
    seen = seen or _Seen.nothing(len(stream))
    p = cap.packets
    _ends(p, stream, seen)
    end_ns = np.where(seen.end_packet >= 0, seen.end_ts, cap.connections["last_ts"].array.asi8)
    _silences(p, stream, end_ns, seen)
    m = methods(cap)
    ms = m["stream"].to_numpy(np.int64)
    f = cap.frames
    hb = (f["type"] == "heartbeat").to_numpy(dtype=bool, na_value=False)
    fpos = np.searchsorted(stream, f["stream"].to_numpy(np.int64)[hb])
    fdir = f["direction"].to_numpy(object)[hb]
    for d in DIRECTIONS:
        seen.closed[d] |= np.isin(stream, ms[select(m, "connection.close", d)])
        seen.heartbeat_frames[d] += np.bincount(fpos[fdir == d], minlength=len(stream)).astype(np.int64)
    return seen


def _ends(p: pd.DataFrame, stream: np.ndarray, seen: _Seen) -> None:
    """The first FIN or RST of either side of each connection that has none yet in `seen`
    (packets come in packet order: the first per stream)."""
    fin = (p["flags"].to_numpy(np.int64) & (FIN | RST)) != 0
    rows = np.flatnonzero(fin)
    s = p["stream"].to_numpy(np.int64)[rows]
    first = rows[np.unique(s, return_index=True)[1]]
    pos = np.searchsorted(stream, p["stream"].to_numpy(np.int64)[first])
    new = seen.end_packet[pos] < 0
    pos, first = pos[new], first[new]
    seen.end_packet[pos] = p["packet"].to_numpy(np.int64)[first]
    seen.end_ts[pos] = p["ts"].array.asi8[first]
    seen.end_c2s[pos] = p["direction"].to_numpy(object)[first] == "c2s"


def _silences(p: pd.DataFrame, stream: np.ndarray, end_ns: np.ndarray, seen: _Seen) -> None:
    """Per connection and direction: the longest time without payload from the direction's first
    payload on, up to the connection's end (`end_ns`: its first FIN or RST, else its last packet),
    continued from `seen`. Payloads are taken in time order: a slice's packets all follow the
    slices' before in time (`amqpcap.model.facts.clean_cuts`), so the first payload of a slice
    follows the latest one before it."""
    st = p["stream"].to_numpy(np.int64)
    ts = p["ts"].array.asi8
    pos = np.searchsorted(stream, st)
    for d in DIRECTIONS:
        keep = (p["payload_bytes"].to_numpy(np.int64) > 0) & (p["direction"] == d).to_numpy(dtype=bool) \
            & (ts <= end_ns[pos])
        g, t = pos[keep], ts[keep]
        order = np.lexsort((t, g))
        g, t = g[order], t[order]
        before = np.r_[_NONE, t[:-1]]  # the previous payload's time: of the same connection, or carried
        first = np.r_[True, g[1:] != g[:-1]][:len(t)]
        before[first] = seen.last[d][g[first]]
        gap = np.where(before == _NONE, 0, t - before)
        np.maximum.at(seen.longest[d], g, gap)
        np.maximum.at(seen.last[d], g, t)


def _rows(cap: Capture, seen: _Seen) -> pd.DataFrame:
    """A partition's connections: one row each (COLUMNS), from what their packets told."""
    c = cap.connections
    stream = c["stream"].to_numpy(np.int64)
    has_end = seen.end_packet >= 0
    end_ns = np.where(has_end, seen.end_ts, c["last_ts"].array.asi8)
    ended_by = np.where(has_end, np.where(seen.end_c2s, "client", "broker"), None).astype(object)
    out = pd.DataFrame({"stream": stream,  # (named in the merge: labels depend on every connection)
                        "heartbeat_s": c["heartbeat_s"].to_numpy(float, na_value=np.nan)})
    for d in DIRECTIONS:
        last = seen.last[d]
        out[f"{d}_longest_silence_s"] = np.where(last != _NONE, np.maximum(seen.longest[d], end_ns - last) / 1e9,
                                                 np.nan)
    out["ended_by"] = ended_by
    out["end_packet"] = pd.arrays.IntegerArray(np.where(has_end, seen.end_packet, 0), ~has_end)
    out["end_ts"] = pd.to_datetime(np.where(has_end, seen.end_ts, _NONE).view("M8[ns]"), utc=True)  # (_NONE: NaT)
    # did the side that ended the TCP connection first close it with AMQP (connection.close)?
    out["closed_with_amqp"] = np.where(ended_by == "client", seen.closed["c2s"],
                                       np.where(ended_by == "broker", seen.closed["s2c"], False))
    # the other side's silence up to that end
    silent = np.where(ended_by == "broker", "client", np.where(ended_by == "client", "broker", None))
    last = np.where(silent == "client", seen.last["c2s"], seen.last["s2c"])
    told = has_end & (last != _NONE)
    out["silent_side"] = np.where(told, silent, None)
    out["silence_before_end_s"] = np.where(told, (end_ns - last) / 1e9, np.nan)
    for d in DIRECTIONS:
        out[f"heartbeat_frames_{d}"] = seen.heartbeat_frames[d]
    out["problem"] = _problem(out)
    return out[[c_ for c_ in COLUMNS if c_ != "connection"]]


def _problem(t: pd.DataFrame) -> np.ndarray:
    """Each connection's heartbeat problem (PROBLEMS), or None."""
    hb = t["heartbeat_s"].to_numpy(float)
    missed = (hb > 0) & ~t["closed_with_amqp"].to_numpy(bool) \
        & (t["silence_before_end_s"].to_numpy(float) >= MISSED_INTERVALS * hb)
    problem = np.select([missed, (hb > 0) & (hb < HEARTBEAT_LOW_S), hb == 0], list(PROBLEMS), "")
    return np.where(problem == "", None, problem).astype(object)


@analyzer("heartbeats")
class Heartbeats(Analyzer[_Seen, list]):
    """Negotiated heartbeats, each side's longest silence, connections dropped for missed heartbeats."""

    def step(self, seen: _Seen | None, rows: Capture, facts: CaptureFacts, last: bool) -> _Seen:
        return _seen(rows, seen)

    def close(self, seen: _Seen, rows: Capture, facts: CaptureFacts) -> list[pd.DataFrame]:
        """The partition's connections: one row each (COLUMNS), in a list of the partitions' rows."""
        return [_rows(rows, seen)]

    def merge(self, a: list[pd.DataFrame], b: list[pd.DataFrame]) -> list[pd.DataFrame]:
        return a + b

    def finish(self, partitions: list[pd.DataFrame], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        conns = amqp091_rows(cap, merge_rows(partitions, ["stream"]))
        conns["connection"] = connection_labels(cap, conns["stream"])
        conns = conns[COLUMNS]
        for col in ("connection", "ended_by", "silent_side", "problem"):  # one dtype however many partitions
            conns[col] = pd.Series(conns[col].to_numpy(object), dtype=object).where(conns[col].notna().to_numpy(),
                                                                                     None)
        hb = conns["heartbeat_s"]
        summary = {"heartbeats": {
            "connections_negotiated": int(hb.notna().sum()),
            "disabled": int((hb == 0).sum()),
            "below_5_seconds": int(((hb > 0) & (hb < HEARTBEAT_LOW_S)).sum()),
            "heartbeat_min_s": None if not (hb > 0).any() else int(hb[hb > 0].min()),
            "dropped_for_missed_heartbeats": int((conns["problem"] == PROBLEMS[0]).sum()),
        }}
        finding = _finding(cap, conns)
        return AnalyzerResult("heartbeats", tables={"connections": conns}, summary=summary,
                              findings=[finding] if finding else [], plots=[])


# -- the finding ------------------------------------------------------------------------------

def _titles(w, n: int, counts: dict[str, int]) -> str:
    if w.problem == PROBLEMS[0]:
        closer = "broker" if w.silent_side == "client" else "client"
        what = (f"{w.connection} was dropped for missed heartbeats: the {w.silent_side} sent nothing for "
                f"{w.silence_before_end_s:.1f} s with a {int(w.heartbeat_s)} s heartbeat, then the {closer} "
                f"ended the TCP connection without connection.close")
    elif w.problem == PROBLEMS[1]:
        what = f"{w.connection} negotiated a {int(w.heartbeat_s)} s heartbeat, below the 5 s RabbitMQ advises"
    else:
        what = f"{w.connection} runs with heartbeats disabled (heartbeat 0)"
    others = dict(counts, **{w.problem: counts[w.problem] - 1})  # (the worst is told above)
    n_others = n - 1
    return what if n_others == 0 else f"{what}; {counted(n_others, 'more connection')} with " \
        f"heartbeat problems ({', '.join(f'{v:,} {WORDS[k]}' for k, v in others.items() if v)})"


ADVICE = {
    PROBLEMS[0]: "A side that sends nothing for two heartbeat intervals is declared dead and its connection "
                 "closed, with its unacked messages requeued. Usually the client's thread that drives the "
                 "connection was busy (a long job in a message handler, a GC pause, a blocked event loop): "
                 "keep the connection's I/O running during long work (pika: do the work in another thread and "
                 "hand results back with add_callback_threadsafe), or raise the timeout; RabbitMQ's "
                 "heartbeats guide recommends 5 to 20 seconds.",
    PROBLEMS[1]: "Heartbeat timeouts below 5 seconds are likely to close healthy connections on a short network "
                 "hiccup or GC pause (RabbitMQ's heartbeats guide); 5 to 20 seconds is the sane range.",
    PROBLEMS[2]: "With heartbeats disabled, a peer that vanished without closing (a crashed host, a dropped "
                 "NAT or firewall mapping) is noticed only by TCP keepalive, hours later, while the broker "
                 "keeps its consumers and unacked messages. Enable heartbeats (RabbitMQ's default is 60 s) "
                 "unless TCP keepalives are tuned for this.",
}


def _finding(cap: Capture, conns: pd.DataFrame) -> Finding | None:
    """heartbeat-problems: one finding, its connections as subjects, dropped ones first."""
    bad = conns[conns["problem"].notna()]
    if len(bad) == 0:
        return None
    rank = bad["problem"].map({p: i for i, p in enumerate(PROBLEMS)})
    bad = bad.assign(_rank=rank, _silence=bad["silence_before_end_s"].fillna(0.0)).sort_values(
        ["_rank", "_silence", "stream"], ascending=[True, False, True], kind="stable")
    w, _, subjects = worst_first(cap, bad, lambda r: dict(
        problem=r.problem, heartbeat_s=int(r.heartbeat_s),
        **({"silent_side": r.silent_side, "silence_before_end_s": float(r.silence_before_end_s),
            "ended_by": r.ended_by, "end_packet": int(r.end_packet)} if r.problem == PROBLEMS[0] else {}),
        severity="warning" if r.problem == PROBLEMS[0] else "info"))
    counts = {p: int((bad["problem"] == p).sum()) for p in PROBLEMS}
    severity = "warning" if counts[PROBLEMS[0]] else "info"
    loud = bad[bad["problem"] == w.problem]
    evidence = {
        "problem": w.problem, "heartbeat_s": int(w.heartbeat_s),
        "silent_side": w.silent_side if w.problem == PROBLEMS[0] else None,
        "silence_before_end_s": float(w.silence_before_end_s) if w.problem == PROBLEMS[0] else None,
        "ended_by": w.ended_by if w.problem == PROBLEMS[0] else None,
        "connections_dropped": counts[PROBLEMS[0]], "connections_heartbeat_low": counts[PROBLEMS[1]],
        "connections_heartbeat_disabled": counts[PROBLEMS[2]],
        "connections_with_this_finding": len(bad), "streams": sorted(int(s) for s in bad["stream"]),
        "packets": [int(w.end_packet)] if w.problem == PROBLEMS[0] and not pd.isna(w.end_packet) else [],
        **filter_evidence(streams_part(loud['stream']), f" && {FILTER}"),
    }
    advice = " ".join(ADVICE[p] for p in PROBLEMS if counts[p])
    impact = 1.0 if counts[PROBLEMS[0]] else 0.2 if counts[PROBLEMS[1]] else 0.1
    return Finding("heartbeat-problems", severity, _titles(w, len(bad), counts), evidence, advice,
                   impact=impact, subjects=subjects)
