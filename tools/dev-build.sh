#!/usr/bin/env bash
# Fast rebuild of the native core for an editable install (pip install -e . done once).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --manifest-path rust/Cargo.toml --quiet
so=$(ls amqpcap/_core*.so 2>/dev/null | head -1 || true)  # none yet in a fresh clone
cp rust/target/release/lib_core.so "${so:-amqpcap/_core.abi3.so}"
