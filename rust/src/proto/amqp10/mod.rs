//! AMQP 1.0 (OASIS, 2012; RabbitMQ 4's native protocol): pure framing parsers, the
//! per-direction frame decoder, and what its frames mean to the tables. Today a connection's
//! AMQP 1.0 frames are counted and named (connections: `protocol`, `frames`), not yet rows of a
//! table of their own. `types` (the type system) and `performatives` (each frame body's fields,
//! a transfer's message sections) are the pure decoding layer such a table is built from.
pub mod decoder;
pub mod parser;
pub mod performatives;
pub mod types;
pub(crate) mod session;
