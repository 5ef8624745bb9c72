//! The `anomalies` table (docs/tables.md): the ledger of what was not decoded and why, capped
//! at `max_anomalies` rows (later ones summed per kind).

use super::PacketTimes;
use crate::anomaly::AnomalyKind;
use crate::output::tables::{Column, OptCol, RowOrigin, StrCol, Table,
    DIRECTIONS,
};

#[derive(Default)]
pub struct AnomaliesBuilder {
    pub(crate) kind: Vec<i8>,
    pub(crate) stream: OptCol<i32>,
    pub(crate) from_a: Vec<bool>,
    pub(crate) packet: OptCol<i32>,
    /// The packet's time when the row was made of a packet of no connection (known then: no
    /// other table holds it); None for a connection's rows (`PacketTimes` has their packets).
    pub(crate) ts: Vec<Option<i64>>,
    pub(crate) bytes: Vec<i64>,
    pub(crate) detail: StrCol,
    /// Rows kept (`max_anomalies`); past it, anomalies are summed per kind in `over`.
    pub(crate) cap: u64,
    /// Per kind: (anomalies, bytes, first packet and its time) not given a row of their own.
    pub(crate) over: Vec<(AnomalyKind, u64, u64, u32, Option<i64>)>,
}

impl AnomaliesBuilder {
    /// A row (or, past the cap, a count). `ts`: the packet's time for a row of no connection.
    pub(crate) fn push(&mut self, kind: AnomalyKind, origin: Option<RowOrigin>, packet: Option<u32>, ts: Option<i64>, bytes: u64, detail: String) {
        if self.kind.len() as u64 >= self.cap {
            match self.over.iter_mut().find(|o| o.0 == kind) {
                Some(o) => {
                    o.1 += 1;
                    o.2 += bytes;
                }
                None => self.over.push((kind, 1, bytes, packet.unwrap_or(0), ts)),
            }
            return;
        }
        self.push_row(kind, origin, packet, ts, bytes, detail);
    }

    /// One row per kind for the anomalies past the cap (their per-stream detail is lost; the
    /// bytes add up).
    pub(crate) fn summarise_over_cap(&mut self) {
        for (kind, n, bytes, packet, ts) in std::mem::take(&mut self.over) {
            let detail = format!("{n} more {} anomalies ({bytes} bytes) have no row of their own: the table reached max_anomalies rows", kind.name());
            self.push_row(kind, None, Some(packet), ts, bytes, detail);
        }
    }

    /// A row whatever the cap (the few file-level rows that are updated at the end).
    pub(crate) fn push_row(&mut self, kind: AnomalyKind, origin: Option<RowOrigin>, packet: Option<u32>, ts: Option<i64>, bytes: u64, detail: String) {
        let code = AnomalyKind::ALL.iter().position(|k| *k == kind).unwrap() as i8;
        self.kind.push(code);
        self.stream.push(origin.map(|o| o.stream as i32));
        self.from_a.push(origin.is_some_and(|o| o.from_a));
        self.packet.push(packet.filter(|&p| p > 0).map(|p| p as i32));
        self.ts.push(ts);
        self.bytes.push(bytes as i64);
        self.detail.push(Some(detail.as_bytes()));
    }
}

pub(crate) fn anomalies_table(a: AnomaliesBuilder, a_is_client: &[bool], times: &PacketTimes<'_>) -> Table {
    let direction: Vec<i8> = a
        .stream
        .values
        .iter()
        .zip(&a.stream.valid)
        .zip(&a.from_a)
        .map(|((&s, &valid), &fa)| if !valid { -1 } else if fa == a_is_client[s as usize] { 0 } else { 1 })
        .collect();
    let ts: Vec<i64> = (a.packet.values.iter().zip(&a.packet.valid).zip(&a.ts))
        .map(|((&p, &v), &known)| if v { known.or_else(|| times.get(p)).unwrap_or(0) } else { 0 })
        .collect();
    let ts_valid = a.packet.valid.clone();
    let names: Vec<&'static str> = AnomalyKind::ALL.iter().map(|k| k.name()).collect();
    vec![
        ("kind", Column::Cat(a.kind, names)),
        ("stream", a.stream.finish()),
        ("direction", Column::Cat(direction, DIRECTIONS.to_vec())),
        ("packet", a.packet.finish()),
        ("ts", Column::NullTs(ts, ts_valid)),
        ("bytes", Column::I64(a.bytes)),
        ("detail", a.detail.finish_text()),
    ]
}

