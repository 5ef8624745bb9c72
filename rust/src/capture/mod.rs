//! Capture files and link/IP/TCP headers.
pub mod drop_behind;
pub mod link;
pub mod merge;
pub mod reader;
