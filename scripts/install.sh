#!/usr/bin/env bash
# Install amqpcap into a virtual environment of its own (default ./.venv), so it works with a
# distribution's externally managed python3 (PEP 668: Debian 12, Ubuntu 24.04) as with any other.
#
#   bash scripts/install.sh            # amqpcap itself
#   bash scripts/install.sh '.[test]'  # editable, with what the tests need (scripts/test.sh does this)
#
# What it does, and what it downloads:
# - the C linker Rust needs (`cc`) and Python's venv module, with apt-get, only when missing;
# - a virtual environment (AMQPCAP_VENV, default .venv in the checkout);
# - the Python dependencies from PyPI (numpy, pandas, pyarrow, matplotlib, ...: ~150 MB) and maturin;
# - the native core, compiled from source by cargo (crates from crates.io): ~2 minutes on 2 cores.
# Rust itself must come from rustup (https://rustup.rs): distributions' rustc is often too old.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-.}
venv=${AMQPCAP_VENV:-.venv}

say() { printf 'amqpcap install: %s\n' "$*" >&2; }
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
  command -v apt-get >/dev/null || { say "please install $* with your package manager"; exit 1; }
  say "installing $* (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  sudo_if_needed apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { sudo_if_needed apt-get update -qq && sudo_if_needed apt-get install -y -qq "$@" >/dev/null; }
}

if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
command -v cargo >/dev/null || { say "cargo not found: install Rust with rustup first (https://rustup.rs)"; exit 1; }
command -v cc >/dev/null || apt_install gcc libc6-dev
command -v python3 >/dev/null || apt_install python3
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { say "python3 is $(python3 -V 2>&1): amqpcap needs Python 3.10 or newer"; exit 1; }

# Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a separate package.
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    ver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python$ver-venv" || apt_install python3-venv
  fi
  say "creating the virtual environment $venv"
  python3 -m venv "$venv"
fi

say "installing $target into $venv (compiles the Rust core: about 2 minutes)"
editable=()
[ "$target" = . ] || editable=(-e)
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${editable[@]}" "$target"
say "done: $venv/bin/amqpcap (or: source $venv/bin/activate)"
