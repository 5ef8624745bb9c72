#![no_main]
// The harness (input format, invariants) is _core::testkit::amqp_decoder, shared with the stable
// regression replay in rust/tests/fuzz_regressions.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| _core::testkit::amqp_decoder(data));
