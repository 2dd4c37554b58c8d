#!/usr/bin/env bash
# Sets everything up and runs examples/quickstart.py against the embedded emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --release
exec .venv/bin/python examples/quickstart.py
