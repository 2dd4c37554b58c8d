#!/usr/bin/env bash
# Sets everything up and runs every test: Rust unit tests, the stub check, mypy on the examples,
# and the Python suite against the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== Rust tests"
cargo test --lib --quiet
echo "== .pyi stubs match the binary"
.venv/bin/python -m mypy.stubtest sensorium._core
echo "== mypy --strict on examples/"
.venv/bin/mypy --strict examples/
echo "== Python tests"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
