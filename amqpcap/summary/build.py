"""summary.json: the capture's numbers, every analyzer's summary, the findings settled one per
cause, and the overview (schema: docs/summary.md)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..analysis.consequences import settled
from ..analysis.registry import AnalyzerResult, Finding
from ..derive.tally import amqp10_frame_count, capture_tally, frame_count, method_counts
from ..io.load import Capture
from ..model.written_values import jsonable
from .overview import overview


def capture_summary(cap: Capture) -> dict[str, Any]:
    s = cap.summary
    return {
        "path": s["path"],
        "format": s["format"],
        "compressed": s["compressed"],
        "file_bytes": s["file_bytes"],
        "packets": s["packets"],
        "tcp_packets": s["tcp_packets"],
        "first_ts": s["first_ts"],
        "last_ts": s["last_ts"],
        "duration_s": (s["last_ts"] - s["first_ts"]).total_seconds() if s["first_ts"] is not None else 0.0,
        "link_types": s["link_types"],
        "connections": len(cap.connections),
        "frames": frame_count(cap),
        "amqp10_frames": amqp10_frame_count(cap),
        "anomalies": {str(k): int(n) for k, n in cap.anomalies["kind"].value_counts().items() if n},
        "warnings": s["warnings"],
        "tls": _tls_summary(cap),
        # the files read as this capture (one, or a set merged by time: docs/tables.md)
        "files": [{"name": f["name"], "format": f.get("format"), "compressed": f.get("compressed"),
                   "packets": f.get("packets"), "file_bytes": f["file_bytes"], "first_ts": f["first_ts"],
                   "last_ts": f["last_ts"], "skipped": f["error"][1] if f["error"] else None}
                  for f in s.get("files", [])],
    }


def _tls_summary(cap: Capture) -> dict[str, Any]:
    c = cap.connections
    tls = c["tls"] if "tls" in c else pd.Series([], dtype=bool)
    decrypted = c["tls_decrypted"] if "tls_decrypted" in c else pd.Series([], dtype=bool)
    return {"connections": int(tls.sum()), "decrypted": int(decrypted.sum()),
            "skipped": int((tls & ~decrypted).sum()), "keylog": cap.summary.get("tls_keylog")}


def redaction_summary(cap: Capture) -> dict[str, Any]:
    """What the outputs leave out on purpose: SASL responses and challenges (passwords),
    connection.update-secret secrets, and message bodies unless asked for (docs/summary.md)."""
    t = capture_tally(cap)
    n = lambda *methods: int(sum(t.methods.get(m, 0) for m in methods))  # noqa: E731
    return {
        "sasl_responses": n("connection.start-ok", "connection.secure-ok"),
        "sasl_challenges": n("connection.secure"),
        "update_secrets": n("connection.update-secret"),
        "bodies_kept": cap.bodies is not None,
        "body_bytes_seen": t.body_bytes_seen,
        "body_bytes_kept": t.body_bytes_kept,
    }


def build_summary(cap: Capture, results: list[AnalyzerResult]) -> dict[str, Any]:
    """summary.json (schema: docs/summary.md)."""
    summary: dict[str, Any] = {"capture": capture_summary(cap), "methods": method_counts(cap),
                               "redacted": redaction_summary(cap)}
    for r in results:
        summary.update(r.summary)
    findings: list[Finding] = settled(results)
    summary["findings"] = [f.to_json() for f in findings]
    summary["overview"] = overview(cap, results)
    return jsonable(summary)
