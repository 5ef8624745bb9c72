//! AMQP 1.0 (OASIS, 2012; RabbitMQ 4's native protocol): pure framing parsers, the
//! per-direction frame decoder, and what its frames mean to the tables: rows of `amqp10_frames`
//! (`session`). `types` (the type system) and `performatives` (each frame body's fields, a
//! transfer's message sections) are the pure decoding layer that table is built from.
pub mod decoder;
pub(crate) mod deliveries;
pub mod parser;
pub mod performatives;
pub mod types;
pub(crate) mod session;
