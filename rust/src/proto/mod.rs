//! The protocol decoders behind one seam.
pub mod amqp091;
pub mod amqp10;
pub mod detect;
pub mod dispatch;
pub mod facts;
pub mod sink;
