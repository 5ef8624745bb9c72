"""The byte-accounting check (docs/tables.md, "Byte accounting"), per connection and direction.

Every byte of an AMQP connection's stream is decoded into a frame, or skipped, or missing, and
every skipped or missing byte is in exactly one `anomalies` row of a kind that counts them:
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: anomaly kinds whose `bytes` are stream bytes seen but not decoded (`*_bytes_skipped`)
SKIPPED_KINDS = frozenset({"resync-skipped", "incomplete-frame", "frame-limit", "tls-encrypted"})
#: anomaly kinds whose `bytes` are stream bytes never seen (`*_bytes_missing`)
MISSING_KINDS = frozenset({"capture-gap", "truncated-packet", "reassembly-overflow"})
FRAME_OVERHEAD = 8  # frame header (7) and frame-end octet
PROTOCOL_HEADER = 8


def byte_accounting_problems(cap) -> list[str]:
    """What does not add up, one line per connection direction (empty when all is well)."""
    c = cap.connections
    if not len(c):
        return []
    a = cap.anomalies
    f = cap.frames
    problems = []
    for d in ("c2s", "s2c"):
        decoded = c[f"{d}_bytes_decoded"].to_numpy(np.int64)
        skipped = c[f"{d}_bytes_skipped"].to_numpy(np.int64)
        missing = c[f"{d}_bytes_missing"].to_numpy(np.int64)
        span = c[f"{d}_stream_bytes"].to_numpy(np.int64)
        streams = c["stream"].to_numpy(np.int64)

        def per_stream(rows: pd.DataFrame, values: np.ndarray) -> np.ndarray:
            s = pd.Series(values).groupby(rows["stream"].to_numpy(np.int64)).sum()
            return s.reindex(streams, fill_value=0).to_numpy(np.int64)

        mine = a[(a["direction"] == d).fillna(False).to_numpy(bool)]
        kind = mine["kind"].astype(str)
        skipped_rows = mine[kind.isin(SKIPPED_KINDS).to_numpy()]
        missing_rows = mine[kind.isin(MISSING_KINDS).to_numpy()]
        skipped_by_anomalies = per_stream(skipped_rows, skipped_rows["bytes"].to_numpy(np.int64))
        missing_by_anomalies = per_stream(missing_rows, missing_rows["bytes"].to_numpy(np.int64))
        frames = f[(f["direction"] == d).to_numpy(bool)]
        wire = per_stream(frames, frames["size_bytes"].to_numpy(np.int64) + FRAME_OVERHEAD)
        header = np.where(c["protocol_header_seen"].to_numpy(bool), PROTOCOL_HEADER, 0)
        # an AMQP 1.0 connection's frames are no rows of `frames` (docs/tables.md)
        framed_in_table = (c["protocol"] != "1.0").fillna(True).to_numpy(bool)
        checks = {
            "decoded + skipped + missing != stream bytes": decoded + skipped + missing != span,
            "skipped bytes != bytes of skipping anomalies": skipped != skipped_by_anomalies,
            "missing bytes != bytes of missing anomalies": missing != missing_by_anomalies,
            # decoded bytes are the frames in the table (a body frame may have lost bytes to a
            # capture gap: its size counts, its missing bytes do not) and the protocol header
            "frames in the table do not cover the decoded bytes":
                framed_in_table & ((decoded > wire + header) | (wire > decoded + missing)),
        }
        for what, bad in checks.items():
            for i in np.flatnonzero(bad)[:5]:
                problems.append(
                    f"stream {streams[i]} {d}: {what} (decoded {decoded[i]}, skipped {skipped[i]}, missing {missing[i]}, "
                    f"stream {span[i]}; anomalies: skipped {skipped_by_anomalies[i]}, missing {missing_by_anomalies[i]}; "
                    f"frames {wire[i]} bytes)"
                )
    return problems


def assert_byte_accounting(cap) -> None:
    problems = byte_accounting_problems(cap)
    assert not problems, "\n".join(problems[:20])
