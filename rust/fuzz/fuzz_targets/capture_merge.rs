#![no_main]
// The harness (input format, invariants) is _core::testkit::capture_merge, shared with the stable
// regression replay in rust/tests/fuzz_regressions.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| _core::testkit::capture_merge(data));
