"""Where every AMQP frame of a capture lies on the wire, whichever protocol it is: the packets
it starts and ends in, its stream direction and frame type. The TCP-level views (frames per
packet, packets per frame) count frames of AMQP 0-9-1 (`frames`) and 1.0 (`amqp10_frames`)
alike, as the core's `packets.frames_ended` does.
"""

from __future__ import annotations

import pandas as pd

from ..io.load import Capture

#: the columns a frame's place on the wire is told by (both frames tables have them)
SPAN_COLUMNS = ("packet", "first_packet", "stream", "direction", "type")


def frame_types(cap: Capture) -> list[str]:
    """Every frame type of either protocol, 0-9-1's first (method, header, body, heartbeat),
    then 1.0's (amqp, sasl, empty): the categories of `frame_spans`' `type`, the same in every
    partition and slice, so a type's code means one type everywhere."""
    return [*cap.frames["type"].cat.categories, *cap.amqp10_frames["type"].cat.categories]


def frame_spans(cap: Capture) -> pd.DataFrame:
    """SPAN_COLUMNS of every frame: the 0-9-1 frames, then the 1.0 frames (each in packet order),
    `type` categorical in `frame_types` (a 1.0 frame type keeps its name: `amqp` is 1.0's
    performative frame, Part 2 §2.3.1, `sasl` its SASL frame §5.3.1)."""
    types = frame_types(cap)

    def spans(frames: pd.DataFrame) -> pd.DataFrame:  # (the columns not copied)
        cols = {c: frames[c] for c in SPAN_COLUMNS}
        cols["type"] = cols["type"].cat.set_categories(types)
        return pd.DataFrame(cols, copy=False)

    if not len(cap.amqp10_frames):
        return spans(cap.frames)
    return pd.concat([spans(cap.frames), spans(cap.amqp10_frames)], ignore_index=True)
