//! amqpcap's native core: capture files → TCP conversations → protocol decoders → tables.
//! docs/core.md walks through the folders; the stub `amqpcap/_core.pyi` documents what Python
//! sees of it (the binding, `binding/`).

pub mod anomaly;
pub mod buckets;
pub mod capture;
pub mod error;
pub mod flow;
pub mod limits;
pub mod output;
pub mod pipeline;
pub mod proto;
#[cfg(feature = "fuzzing")]
pub mod testkit;
pub mod tls;

#[cfg(feature = "python")]
mod binding;
