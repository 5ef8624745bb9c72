#![no_main]
// The harness (invariants) is _core::testkit::amqp10_performatives, shared with the stable
// regression replay in rust/tests/fuzz_regressions.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| _core::testkit::amqp10_performatives(data));
