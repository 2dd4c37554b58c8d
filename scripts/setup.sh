#!/usr/bin/env bash
# Creates .venv (if missing), installs the pinned tools and builds sensorium into it.
# Needs only python3 (3.10+), pip and cargo on the machine. Usage: scripts/setup.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
# maturin develop builds the Rust core and installs the package in editable mode.
.venv/bin/maturin develop --quiet "$@" >/dev/null
