"""Quickstart: ask a reasoning model about an uploaded text file, then embed a numeric window.

Runs against the embedded emulator (no network, no key to obtain). To run it against the hosted
platform instead, set SENSORIUM_API_KEY and SENSORIUM_BASE_URL.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

import sensorium
from sensorium.errors import ConflictError
from sensorium.testing import Emulator

REASONER = "Reasoner::c2_4_7b_251215a172f6d7"
ENCODER = "Encoder::encoder_embeddings_01"

NOTES = """Shift report, line 3.
06:10 conveyor belt stopped: jam at the second sorter, cleared in 4 minutes.
09:45 temperature alarm on oven B (212 C), vented, back to 195 C by 09:52.
Output 1,840 units, 12 rejected.
"""


def run(client: sensorium.Client) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "shift-report.txt"
        path.write_text(NOTES)
        try:
            record = client.files.upload(path)
        except ConflictError:  # uploaded on an earlier run: reuse it
            record = client.files.metadata(path.name)
    print(f"uploaded {record.file_id} ({record.file_uid})")

    answer = client.query(
        REASONER,
        "What went wrong during the shift?",
        file_ids=[record.file_id],
        max_new_tokens=64,
    )
    print(f"reasoning answer: {answer.text}")

    # Three sensor channels, 1024 points each: shaped (channels, window).
    t = np.linspace(0.0, 8 * np.pi, 1024)
    window = np.stack([np.sin(t), np.cos(t), 0.1 * t])
    embeddings = client.embed(ENCODER, window)
    print(f"embedding matrix: shape {embeddings.vectors.shape}, dtype {embeddings.vectors.dtype}")


def main() -> None:
    if os.environ.get("SENSORIUM_BASE_URL"):
        with sensorium.Client() as client:
            run(client)
        return
    with Emulator() as emulator:
        print(f"emulator running at {emulator.base_url}")
        with emulator.client() as client:
            run(client)


if __name__ == "__main__":
    main()
