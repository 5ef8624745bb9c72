//! Connections and TCP: the conversations and what is kept per connection and per direction
//! (`conn`), conversation keys and per-direction reassembly (`tcp`).

pub mod conn;
pub mod tcp;
