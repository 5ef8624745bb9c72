"""A row per link (`handles`), with what its deliveries and its credit come to: the table a user
reads first. Columns in docs/amqp10.md."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ..cache import CONNECTION, derivation
from .credit import credit
from .deliveries import deliveries
from .frames import amqp10_frames
from .handles import links as handles

COLUMNS = ["stream", "session", "link", "name", "attached", "client_role", "sender_direction", "source_address",
           "target_address", "snd_settle_mode", "rcv_settle_mode", "client_attach_packet", "broker_attach_packet",
           "client_detach_packet", "broker_detach_packet", "detach_error_condition", "detach_error_description",
           "detach_error_side", "transfer_frames", "deliveries", "delivery_bytes", "settled_at_send",
           "dispositions", "zero_credit_s", "zero_credit_share"]


def link_rows_of(f: pd.DataFrame, link_table: pd.DataFrame, link_of_frame: np.ndarray, delivery_table: pd.DataFrame,
                 dispositions: pd.DataFrame, credit_links: pd.DataFrame) -> pd.DataFrame:
    """The links of `f` with their transfers, deliveries, dispositions and time at zero credit."""
    t = link_table.copy()
    key = ["stream", "link"]
    is_t = (f["performative"] == "transfer").to_numpy(bool, na_value=False) & (link_of_frame >= 0)
    frames = pd.DataFrame({"stream": f["stream"].to_numpy(np.int64)[is_t], "link": link_of_frame[is_t]})
    per = frames.groupby(key).size().rename("transfer_frames")
    dg = delivery_table.groupby(key).agg(deliveries=("delivery_id", "size"), delivery_bytes=("size_bytes", "sum"),
                                         settled_at_send=("settled_at_send", "sum"))
    disp = dispositions[dispositions["link"] >= 0].groupby(key).size().rename("dispositions")
    cr = credit_links.set_index(key)[["zero_credit_s", "zero_credit_share"]]
    t = t.join(per, on=key).join(dg, on=key).join(disp, on=key).join(cr, on=key)
    for c in ("transfer_frames", "deliveries", "delivery_bytes", "settled_at_send", "dispositions"):
        t[c] = t[c].fillna(0).astype(np.int64)
    t["zero_credit_s"] = t["zero_credit_s"].astype(np.float64)
    t["zero_credit_share"] = t["zero_credit_share"].astype(np.float64)
    return t[COLUMNS].reset_index(drop=True)


@derivation(CONNECTION)
def link_rows(cap: Capture) -> pd.DataFrame:
    """`link_rows_of` the capture's `amqp10_frames`."""
    h, d = handles(cap), deliveries(cap)
    return link_rows_of(amqp10_frames(cap), h.table, h.of_frame, d.table, d.dispositions, credit(cap).links)
