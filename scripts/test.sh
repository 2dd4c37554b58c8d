#!/usr/bin/env bash
# Sets everything up and runs every test: Rust unit tests, the stub check, mypy on the package and the examples,
# and the Python suite against the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== Rust tests"
cargo test --lib --quiet
echo "== .pyi stubs match the binary and the resources"
# Every hand-written stub: the core's and each resource module's (found by their .pyi, so a new
# one is checked without editing this line). The allowlist holds only stubtest's known misreadings.
stubbed=$(cd python && ls sensorium/resources/*.pyi | sed 's/\.pyi$//; s#/#.#g')
.venv/bin/python -m mypy.stubtest sensorium._core $stubbed --allowlist scripts/stubtest-allowlist.txt
echo "== mypy --strict on the package, examples/ and typed usage (tests/typing)"
.venv/bin/mypy --strict python/sensorium examples/ tests/typing/
echo "== Python tests"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
