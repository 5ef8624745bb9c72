#!/usr/bin/env bash
# Install everything the tests need (system packages too) and run every test.
# This is the README's test command, and what CI runs (.ci/run).
#
# It installs, when missing: tshark (the independent reference the tests compare against) and
# chromium (the report is checked in a real headless browser), with apt-get; the package in
# editable mode with its test extras into ./.venv (scripts/install.sh: compiles the Rust core,
# ~2 min); for the fuzz smoke run, Rust's nightly toolchain and cargo-fuzz (~3 min the first time).
# Then: the Rust unit tests, pytest (over every core: pytest-xdist), and each cargo-fuzz target for ~20 s (~3 min in all).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; exit 1; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
missing=()
command -v tshark >/dev/null || missing+=(tshark)
command -v chromium >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash scripts/install.sh '.[test]'
py=${AMQPCAP_VENV:-.venv}/bin/python
# Core unit tests (with the Arrow output and spill files), and the saved fuzz inputs (rust/fuzz/regressions) replayed on stable.
cargo test -q --manifest-path rust/Cargo.toml --no-default-features --features fuzzing,arrow
# pytest over as many processes as there are cores (pytest-xdist; at most 4: each holds a capture's
# tables and some start a Dask cluster or chromium), the 25 slowest tests listed at the end.
"$py" -m pytest -q -n auto --maxprocesses=4 --durations=25

# Fuzzing smoke run (docs/fuzzing.md): each cargo-fuzz target for ~20 s, seeded from fixtures/.
# cargo-fuzz needs the nightly toolchain.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz --locked
smoke=$(mktemp -d)
trap 'rm -rf "$smoke"' EXIT
"$py" rust/fuzz/make_seeds.py "$smoke" --quick
(cd rust && cargo +nightly fuzz build)
for target in capture_reader capture_merge tcp_reassembly amqp_decoder amqp10_performatives; do
  FUZZ_CORPUS="$smoke" FUZZ_ARTIFACTS=rust/fuzz/artifacts FUZZ_RUNS_LOG="" \
    bash rust/fuzz/run-long.sh "$target" "${FUZZ_SMOKE_SECONDS:-20}"
done
