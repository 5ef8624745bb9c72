//! AMQP 0-9-1: the generated spec tables, pure parsers, and the per-direction frame decoder.
pub mod decoder;
pub mod parser;
pub mod session;
pub mod spec;
pub mod spec_types;
