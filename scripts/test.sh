#!/usr/bin/env bash
# Install everything the tests need (system packages too) and run every test.
# This is the README's test command, and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Rust toolchain from rustup (the native core is built from source).
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; exit 1; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
# tshark: the independent reference the tests compare against.
if ! command -v tshark >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get install -y -qq tshark >/dev/null
fi

python3 -m pip install -q --disable-pip-version-check -e ".[test]"
# Core unit tests, and the saved fuzz inputs (rust/fuzz/regressions) replayed on stable.
cargo test -q --manifest-path rust/Cargo.toml --no-default-features --features fuzzing
python3 -m pytest -q

# Fuzzing smoke run (docs/fuzzing.md): each cargo-fuzz target for ~20 s, seeded from fixtures/.
# cargo-fuzz needs the nightly toolchain.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz --locked
smoke=$(mktemp -d)
trap 'rm -rf "$smoke"' EXIT
python3 rust/fuzz/make_seeds.py "$smoke" --quick
(cd rust && cargo +nightly fuzz build)
for target in capture_reader tcp_reassembly amqp_decoder; do
  FUZZ_CORPUS="$smoke" FUZZ_ARTIFACTS=rust/fuzz/artifacts FUZZ_RUNS_LOG="" \
    bash rust/fuzz/run-long.sh "$target" "${FUZZ_SMOKE_SECONDS:-20}"
done
