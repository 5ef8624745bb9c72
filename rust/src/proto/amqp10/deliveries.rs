//! The deliveries of an AMQP 1.0 connection in progress: a delivery split over several transfer
//! frames (Part 2 §2.6.14) is tied together per direction, channel and handle, since its
//! continuation frames carry no delivery-id (Part 2 §2.7.5). The connection's facts hold it
//! (`crate::proto::facts::ConnInfo::amqp10`); `session.rs` asks it what each transfer is.

use std::collections::HashMap;

/// Deliveries in progress per direction at most: a transfer with `more` on a link whose
/// delivery is not tracked then (past this many links each mid-delivery at once) makes its
/// continuation frames rows without a `delivery_id` (as if the first frame were not captured).
/// The spec's own bound, channel-max times handle-max, is 2^48; a client has a delivery in
/// progress per sending link, a handful in practice.
pub const MAX_DELIVERIES_IN_PROGRESS: usize = 4096;

/// A delivery whose last transfer had `more` (Part 2 §2.7.5): the frames that continue it carry
/// no delivery-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InProgress {
    delivery_id: Option<u32>,
    /// Payload bytes of its frames so far; `None` when one of them was not read.
    bytes: Option<u64>,
}

/// The deliveries in progress of a connection, by direction (index 0 sent by endpoint A), and
/// in a direction by (channel, handle).
#[derive(Default)]
pub(crate) struct Deliveries {
    dirs: [HashMap<(u16, u32), InProgress>; 2],
}

/// What a transfer frame is to its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TransferRow {
    pub(crate) delivery_id: Option<u32>,
    pub(crate) continuation: bool,
    /// On the delivery's last frame: its payload bytes over all its frames.
    pub(crate) message_bytes: Option<u64>,
}

impl Deliveries {
    /// A transfer on `channel` with `handle` (`delivery_id`, `more`, `aborted` as its frame
    /// says) carrying `payload` bytes (`None`: unknown) sent by `dir`.
    #[allow(clippy::too_many_arguments)] // (a transfer's fields, each named)
    pub(crate) fn transfer(&mut self, dir: usize, channel: u16, handle: u32, delivery_id: Option<u32>, more: bool, aborted: bool, payload: Option<u64>) -> TransferRow {
        let open = &mut self.dirs[dir];
        let key = (channel, handle);
        let before = open.remove(&key);
        // a continuation carries no delivery-id, or its delivery's (Part 2 §2.7.5); another id
        // starts another delivery (the previous one's last frame was missed)
        let (continuation, delivery_id, bytes) = match before {
            Some(p) if delivery_id.is_none() || delivery_id == p.delivery_id => {
                (true, p.delivery_id, p.bytes.zip(payload).map(|(a, b)| a + b))
            }
            // no delivery-id and nothing in progress: it continues a delivery whose first frame
            // is not in the capture
            _ if delivery_id.is_none() => (true, None, None),
            _ => (false, delivery_id, payload),
        };
        let done = !more || aborted;
        if !done && open.len() < MAX_DELIVERIES_IN_PROGRESS {
            open.insert(key, InProgress { delivery_id, bytes });
        }
        TransferRow { delivery_id, continuation, message_bytes: if done { bytes } else { None } }
    }

    /// A link detached (`handle`) or a session ended (`handle` None) by `dir`: its deliveries in
    /// progress end with it.
    pub(crate) fn forget(&mut self, dir: usize, channel: u16, handle: Option<u32>) {
        self.dirs[dir].retain(|&(c, h), _| c != channel || handle.is_some_and(|x| x != h));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_over_three_frames_is_tied_together_per_link() {
        let mut d = Deliveries::default();
        // link (channel 1, handle 0): delivery 7 in three frames; meanwhile handle 1 sends a
        // one-frame delivery 8, and the other direction a delivery 7 of its own
        let first = d.transfer(0, 1, 0, Some(7), true, false, Some(100));
        assert_eq!(first, TransferRow { delivery_id: Some(7), continuation: false, message_bytes: None });
        assert_eq!(d.transfer(0, 1, 1, Some(8), false, false, Some(5)), TransferRow { delivery_id: Some(8), continuation: false, message_bytes: Some(5) });
        assert_eq!(d.transfer(1, 1, 0, Some(7), false, false, Some(9)).message_bytes, Some(9));
        assert_eq!(d.transfer(0, 1, 0, None, true, false, Some(100)), TransferRow { delivery_id: Some(7), continuation: true, message_bytes: None });
        assert_eq!(d.transfer(0, 1, 0, None, false, false, Some(30)), TransferRow { delivery_id: Some(7), continuation: true, message_bytes: Some(230) });
        // the link's next delivery starts afresh
        assert_eq!(d.transfer(0, 1, 0, Some(9), false, false, Some(4)), TransferRow { delivery_id: Some(9), continuation: false, message_bytes: Some(4) });
        assert!(d.dirs.iter().all(HashMap::is_empty));
    }

    #[test]
    fn a_delivery_whose_start_or_a_frame_was_missed_has_no_total() {
        let mut d = Deliveries::default();
        // the capture starts inside a delivery: no id, no total
        assert_eq!(d.transfer(0, 0, 0, None, true, false, Some(10)), TransferRow { delivery_id: None, continuation: true, message_bytes: None });
        assert_eq!(d.transfer(0, 0, 0, None, false, false, Some(10)), TransferRow { delivery_id: None, continuation: true, message_bytes: None });
        // a frame whose payload is unknown
        d.transfer(0, 0, 0, Some(3), true, false, Some(10));
        d.transfer(0, 0, 0, None, true, false, None);
        assert_eq!(d.transfer(0, 0, 0, None, false, false, Some(10)).message_bytes, None);
        // a new delivery-id where a continuation was due: the earlier delivery's end was missed
        d.transfer(0, 0, 0, Some(4), true, false, Some(10));
        assert_eq!(d.transfer(0, 0, 0, Some(5), false, false, Some(6)), TransferRow { delivery_id: Some(5), continuation: false, message_bytes: Some(6) });
        // an aborted delivery ends it; a detach forgets what its link had in progress
        d.transfer(0, 0, 0, Some(6), true, false, Some(10));
        assert_eq!(d.transfer(0, 0, 0, None, true, true, Some(0)).message_bytes, Some(10));
        d.transfer(0, 2, 5, Some(7), true, false, Some(10));
        d.forget(0, 2, Some(4));
        assert_eq!(d.dirs[0].len(), 1);
        d.forget(0, 2, Some(5));
        assert!(d.dirs[0].is_empty());
        d.transfer(0, 2, 5, Some(8), true, false, Some(10));
        d.forget(0, 2, None);
        assert!(d.dirs[0].is_empty());
    }
}
