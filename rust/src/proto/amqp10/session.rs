//! What the frames of an AMQP 1.0 connection direction mean to the tables: for now, the
//! connection's frame count. Its performatives (open, attach, transfer, disposition, ...) are
//! named by the decoder, ready for a frames table of AMQP 1.0's own.

use crate::proto::amqp10::decoder::{FrameEvent, FrameSink};
use crate::proto::sink::Sink;

impl FrameSink for Sink<'_> {
    fn frame(&mut self, _ev: FrameEvent) {
        self.info.frames += 1;
    }
}
