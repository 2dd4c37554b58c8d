"""Run the emulator as a server: ``python -m sensorium.emulator --port 8765``.

Prints the base URL and the API key of the default organization, then serves until Ctrl-C or
SIGTERM. Tests in another process can steer it over ``/_emulator/*`` (faults, request log,
keys, ``fail_next_job``, ``lag_agent_status``...; ``GET /_emulator/requests?bodies=false`` lists
the log without request bodies). It is a local test double, not the hosted service.

It accepts the model ids production code sends (``Newton::...``, ``OmegaEncoder::...``) and the
spec's neutral spellings. ``--model`` (repeatable) replaces that catalogue::

    python -m sensorium.emulator --model Newton::c2_4_7b_251215a172f6d7 \
        --model Acme::my-finetune=reasoner --model default

``ID=reasoner`` or ``ID=encoder`` gives the family of an id whose prefix the emulator does not
know; ``default`` stands for the whole default catalogue, so ``--model default --model X=...``
adds X to it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any, Optional, Sequence

from sensorium._core import EmulatorServer


def _model_entries(values: Optional[Sequence[str]]) -> Optional[list[Any]]:
    """``--model`` values as catalogue entries; ``None`` (no flag) keeps the default catalogue."""
    if not values:
        return None
    entries: list[Any] = []
    for value in values:
        model_id, sep, family = value.rpartition("=")
        if value == "default":
            entries.extend(EmulatorServer.default_models())
        elif sep:
            # The core checks the family word and names the accepted ones when it is wrong.
            entries.append({"id": model_id, "family": family})
        else:
            entries.append(value)
    return entries


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sensorium.emulator",
        description="Local test double of the sensorium platform API (not the hosted service).",
    )
    p.add_argument("--port", type=int, default=0, help="port to listen on (0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--api-key", default=None, help="key of the default organization (default: random)")
    p.add_argument("--query-delay", type=float, default=0.0, help="simulated worker seconds per query")
    p.add_argument("--max-upload-bytes", type=int, default=None,
                   help="ceiling of the simple upload (POST /files) in bytes of file content; beyond it 413 "
                   "(default 512000000, the platform's 512 MB)")
    p.add_argument(
        "--upload-part-size",
        type=int,
        default=None,
        help="part size of the direct-to-cloud upload in bytes (default 419430400, 400 MiB)",
    )
    p.add_argument(
        "--upload-url-ttl",
        type=float,
        default=None,
        help="seconds a part URL stays valid (default 3600)",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="a model id to accept (repeatable; replaces the default catalogue). ID=reasoner or "
        "ID=encoder gives the family of an id with a prefix the emulator does not know; "
        "'default' adds the whole default catalogue",
    )
    p.add_argument("--work-duration", type=float, default=None,
                   help="seconds each job (agent run, evaluation, optimization trial, batch job, fine-tuning "
                   "job) spends running (default 0.2)")
    p.add_argument("--page-size", type=int, default=None, help="default page size of every list (default 100)")
    p.add_argument("--session-ttl-sec", type=float, default=None,
                   help="seconds without events after which a lens session expires (default 86400)")
    p.add_argument("--lens-heartbeat-interval", type=float, default=None,
                   help="seconds between heartbeats of an idle lens SSE stream (default 1)")
    p.add_argument("--lens-status-style", choices=["enum", "number"], default="enum",
                   help="spelling of lens session_status: enum string or bare number (default enum)")
    p.add_argument("--list-style", choices=("cursor", "offset"), default="cursor",
                   help="how the batch lists page: cursor (releases from 1.1.11, the default) or offset (before)")
    p.add_argument("--rate-limit", type=float, default=None,
                   help="requests per second per organization (bursts of at most as many); beyond it 429 "
                   "with Retry-After (default: no limit)")
    p.add_argument("--max-query-size-mb", type=float, default=None,
                   help="the server's MAX_QUERY_SIZE_MB: combined prompt and encoder request bodies above it "
                   "get 413 (default: 0.04 MB prompts, encoder bodies unlimited)")
    return p


def _as_flag(message: str, parser: argparse.ArgumentParser) -> str:
    """The core's message names the keyword argument (``page_size must be ...``); here it names
    the flag the user typed (``--page-size must be ...``; ``api_key: contains ...`` becomes
    ``--api-key contains ...``)."""
    name, _, rest = message.partition(" ")
    for action in parser._actions:
        if action.dest == name.rstrip(":") and action.option_strings:
            return f"{action.option_strings[0]} {rest}"
    return message


def raise_open_file_limit() -> None:
    """Raises this process's soft limit on open files to its hard limit, as Go's runtime does for
    every program. An emulator in the process of its tests shares their limit, and holds two
    descriptors per connection besides the client's one: a test that gathers a few hundred calls
    ran out under macOS's default soft limit of 256 (Linux's 1,024 at a few thousand), and the
    calls that found the server out of descriptors waited minutes in its accept queue."""
    try:
        import resource
    except ImportError:  # not POSIX: no such limit to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return
    # macOS reports an unlimited hard limit, yet refuses a soft one above its per-process cap.
    for wanted in (hard, 10240):
        if wanted != resource.RLIM_INFINITY and wanted <= soft:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            return
        except (ValueError, OSError):
            continue


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    raise_open_file_limit()
    try:
        server = EmulatorServer(
            port=args.port,
            host=args.host,
            query_delay=args.query_delay,
            max_upload_bytes=args.max_upload_bytes,
            api_key=args.api_key,
            upload_part_size=args.upload_part_size,
            upload_url_ttl=args.upload_url_ttl,
            models=_model_entries(args.model),
            work_duration=args.work_duration,
            page_size=args.page_size,
            session_ttl_sec=args.session_ttl_sec,
            lens_heartbeat_interval=args.lens_heartbeat_interval,
            lens_status_style=args.lens_status_style,
            list_style=args.list_style,
            rate_limit=args.rate_limit,
            max_query_size_mb=args.max_query_size_mb,
        )
    except ValueError as e:
        parser.error(_as_flag(str(e), parser))
    except OSError as e:
        # Binding is the only start-up step that meets the OS: a port in use, or an address this
        # machine does not have.
        parser.error(f"--port {args.port} (--host {args.host}): {e}")
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, on_signal)
    print(f"SENSORIUM_BASE_URL={server.base_url}", flush=True)
    print(f"SENSORIUM_API_KEY={server.api_key}", flush=True)
    try:
        # Waiting in short slices lets the signal handlers run promptly on every platform.
        while not stop.wait(0.2):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
