//! Replays every saved fuzz input (`rust/fuzz/regressions/<target>/*`: crashes found and fixed,
//! plus a few seeds) through the harness of its target, on stable Rust. Run with
//! `cargo test --manifest-path rust/Cargo.toml --no-default-features --features fuzzing`.
//!
//! Any other input, e.g. a fuzzer's crash file, replays with
//! `FUZZ_TARGET=<target> FUZZ_INPUT=<file or directory> cargo test ... --test fuzz_regressions input_from_env`.

use std::fs;
use std::env;
use std::path::{Path, PathBuf};

fn harness(target: &str) -> fn(&[u8]) {
    match target {
        "capture_reader" => _core::testkit::capture_reader,
        "capture_merge" => _core::testkit::capture_merge,
        "tcp_reassembly" => _core::testkit::tcp_reassembly,
        "amqp_decoder" => _core::testkit::amqp_decoder,
        "amqp10_performatives" => _core::testkit::amqp10_performatives,
        other => panic!("unknown fuzz target {other}"),
    }
}

fn replay_path(target: &str, path: &Path) {
    let harness = harness(target);
    let mut files: Vec<PathBuf> = if path.is_dir() {
        fs::read_dir(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect()
    } else {
        vec![path.to_path_buf()]
    };
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", path.display());
    for f in &files {
        let data = fs::read(f).unwrap();
        eprintln!("{target}: {}", f.display());
        harness(&data);
    }
}

fn replay(target: &str) {
    replay_path(target, &Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target));
}

#[test]
fn capture_reader() {
    replay("capture_reader");
}

#[test]
fn capture_merge() {
    replay("capture_merge");
}

#[test]
fn tcp_reassembly() {
    replay("tcp_reassembly");
}

#[test]
fn amqp_decoder() {
    replay("amqp_decoder");
}

#[test]
fn amqp10_performatives() {
    replay("amqp10_performatives");
}

/// Replays `FUZZ_INPUT` through `FUZZ_TARGET`'s harness; does nothing when they are not set.
#[test]
fn input_from_env() {
    if let (Ok(target), Ok(input)) = (env::var("FUZZ_TARGET"), env::var("FUZZ_INPUT")) {
        replay_path(&target, Path::new(&input));
    }
}
