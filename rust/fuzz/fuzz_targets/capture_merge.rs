#![no_main]
// The harness (input format, invariants) is _core::fuzzing::capture_merge, shared with the stable
// regression replay in rust/tests/fuzz_regressions.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| _core::fuzzing::capture_merge(data));
