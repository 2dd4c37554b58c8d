"""The README's Python examples run as written, in order, against the emulator: a user who copies
them gets what the README says. A block preceded by ``<!-- not run by tests/test_readme.py: why -->``
is skipped (each says where it is tested instead)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sensorium
from sensorium.errors import InvalidArgumentError
from sensorium.testing import Emulator

README = Path(__file__).resolve().parent.parent / "README.md"
SKIP_MARK = "<!-- not run by tests/test_readme.py"


def python_blocks() -> list[tuple[str, int, str]]:
    """(section heading, line number, code) of every ```python block not marked as skipped."""
    text = README.read_text()
    blocks = []
    heading = ""
    for match in re.finditer(r"^(#+ [^\n]*)$|^```python\n(.*?)^```", text, re.M | re.S):
        if match.group(1):
            heading = match.group(1)
            continue
        before = text[: match.start()].rstrip().splitlines()
        if before and before[-1].startswith(SKIP_MARK):
            continue
        blocks.append((heading, text[: match.start()].count("\n") + 2, match.group(2)))
    return blocks


def recording(rows: int, columns: list[str]) -> str:
    t = np.arange(rows)
    lines = [",".join(["time", *columns])]
    lines += [",".join([str(1700000000 + i)] + [f"{np.sin(i / (7 + k)):.4f}" for k in range(len(columns))])
              for i in t]
    return "\n".join(lines) + "\n"


@pytest.mark.filterwarnings("ignore:the lens runtime is deprecated:DeprecationWarning")
def test_the_readme_examples_run_as_written(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 10, "the README's examples were not found"
    monkeypatch.chdir(tmp_path)
    # As for a user who has not installed the optional tqdm (None in sys.modules: ImportError).
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    # The local files the examples name.
    (tmp_path / "shift-report.txt").write_text("06:10 conveyor belt stopped: jam at the second sorter.\n")
    (tmp_path / "pump-3.csv").write_text(recording(4096, ["vib_x", "vib_y", "temp"]))
    (tmp_path / "line3.csv").write_text(recording(200, ["temperature", "vibration"]))
    (tmp_path / "recording-50GB.jsonl").write_text('{"prompt": "a small stand-in"}\n')
    (tmp_path / "big.csv").write_text(recording(100, ["a"]))
    with Emulator(work_duration=0.1) as emu:
        monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
        monkeypatch.setenv("SENSORIUM_BASE_URL", emu.base_url)
        with emu.client() as setup:  # the platform files the examples refer to by file_id
            for name in ["idle.csv", "running.csv", "shift_1.csv", "shift_2.csv"]:
                setup.files.upload_base64(name, recording(1024, ["a", "b"]).encode())
        namespace: dict[str, Any] = {"__name__": "readme", "sensorium": sensorium, "np": np}
        for heading, line, code in blocks:
            try:
                exec(compile(code, f"README.md:{line}", "exec"), namespace)
            except Exception as e:  # say which example broke
                pytest.fail(f"the example at README.md:{line} ({heading}) raised {type(e).__name__}: {e}")
        assert namespace["vectors"].shape[1:] == (3, 768)
        assert namespace["batch_job"].status == "COMPLETED" and namespace["paths"]
        with emu.client() as check:  # the last examples made clients of their own emulators
            assert {"recording-50GB.jsonl", "big.csv", "line3.csv"} <= {f.file_id for f in check.files.list()}
            # What the README says of progress=True without tqdm.
            with pytest.raises(InvalidArgumentError, match=re.escape("pip install 'sensorium[progress]'")):
                check.files.upload("big.csv", progress=True)


def test_the_quickstart_runs_against_the_embedded_emulator():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENSORIUM_")}
    script = README.parent / "examples" / "quickstart.py"
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert "reasoning answer:" in done.stdout and "shape (3, 768), dtype float32" in done.stdout
