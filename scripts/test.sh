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
cargo test -q --manifest-path rust/Cargo.toml --no-default-features
python3 -m pytest -q
