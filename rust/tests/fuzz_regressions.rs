//! Replays every saved fuzz input (`rust/fuzz/regressions/<target>/*`: crashes found and fixed,
//! plus a few seeds) through the harness of its target, on stable Rust. Run with
//! `cargo test --manifest-path rust/Cargo.toml --no-default-features --features fuzzing`.

use std::fs;
use std::path::Path;

fn replay(target: &str, harness: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for f in &files {
        let data = fs::read(f).unwrap();
        eprintln!("{target}: {}", f.display());
        harness(&data);
    }
}

#[test]
fn capture_reader() {
    replay("capture_reader", _core::fuzzing::capture_reader);
}

#[test]
fn tcp_reassembly() {
    replay("tcp_reassembly", _core::fuzzing::tcp_reassembly);
}

#[test]
fn amqp_decoder() {
    replay("amqp_decoder", _core::fuzzing::amqp_decoder);
}
