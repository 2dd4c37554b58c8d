"""A small stand-in for the platform's `POST /v0.5/query`, for developing the benchmark harness
while the real emulator is not available. It is never the reported target when the emulator can
be started (see `servers.py`); run.py labels every result with the server it ran against.

It speaks HTTP/1.1 with keep-alive over asyncio's protocol API (no framework, so the server costs
little CPU next to the clients) and answers the spec's response shapes:

* a reasoner model: ``response.response`` is a list of one string;
* an encoder model: ``response.response`` holds one 768-float list per channel of the first
  ``data.numeric_array`` event, values written the way a float32 serialiser writes them.

Usage: ``python benchmarks/standin.py --port N`` prints ``base_url=...`` and ``api_key=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

import numpy as np
import orjson

API_KEY = "standin-benchmark-key"
EMBEDDING_DIM = 768
_AUTH = b"bearer " + API_KEY.encode().lower()


def _reasoner_answer(query: str) -> str:
    return f"Deterministic stand-in answer to {query!r}: the line ran normally; no anomaly was found."


def _embeddings(channels: int) -> np.ndarray:
    rng = np.random.default_rng(channels)
    return rng.standard_normal((channels, EMBEDDING_DIM)).astype(np.float32)


class _Responder:
    def __init__(self) -> None:
        self._embedding_cache: dict[int, object] = {}

    def query(self, body: bytes) -> tuple[int, bytes]:
        try:
            req = json.loads(body)
        except ValueError:
            return 400, b'{"errors":[{"code":"invalid_request","message":"body is not JSON"}]}'
        model = str(req.get("model", ""))
        now = time.time()
        envelope: dict = {
            "query_id": "qry_" + uuid.uuid4().hex[:20],
            "status": "completed",
            "query_timestamp": now,
            "loading_timestamp": now,
            "inference_timestamp": now,
            "response_timestamp": now,
            "query_queue_time_sec": 0.0,
            "inference_time_sec": 0.0,
            "query_response_time_sec": 0.0,
            "gpq_node": "standin-0",
        }
        if model.startswith("Encoder::"):
            channels = 1
            for event in req.get("events") or []:
                if event.get("type") == "data.numeric_array":
                    contents = event["event_data"]["contents"]
                    channels = len(contents) if contents and isinstance(contents[0], list) else 1
                    break
            vectors = self._embedding_cache.get(channels)
            if vectors is None:
                vectors = self._embedding_cache[channels] = _embeddings(channels)
            envelope["response"] = {"response": vectors, "query": "", "generation_latency": 0.0}
        elif model.startswith("Reasoner::"):
            envelope["response"] = {
                "response": [_reasoner_answer(str(req.get("query", "")))],
                "query": req.get("query", ""),
                "prompt": req.get("query", ""),
                "system": "",
                "instruction": "",
                "generation_latency": 0.0,
                "query_gpq_latency": 0.0,
                "query_queue_latency": 0.0,
            }
        else:
            return 400, b'{"errors":[{"code":"invalid_model_version","message":"unknown model"}]}'
        return 200, orjson.dumps(envelope, option=orjson.OPT_SERIALIZE_NUMPY)


_REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found"}


class _Http(asyncio.Protocol):
    def __init__(self, responder: _Responder) -> None:
        self.responder = responder
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            method, path, _ = head[0].split(" ", 2)
            self._respond(method, path, headers, body)

    def _respond(self, method: str, path: str, headers: dict, body: bytes) -> None:
        if headers.get("authorization", "").lower().encode() != _AUTH:
            status, payload = 401, b'{"detail":"Invalid API key"}'
        elif method == "POST" and path.split("?")[0].rstrip("/") == "/v0.5/query":
            status, payload = self.responder.query(body)
        else:
            status, payload = 404, b'{"errors":[{"code":"not_found","message":"no such route"}]}'
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (status, _REASONS.get(status, b"Error"), len(payload))
            + payload
        )


async def _serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    responder = _Responder()
    server = await loop.create_server(lambda: _Http(responder), "127.0.0.1", port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"base_url=http://127.0.0.1:{bound}", flush=True)
    print(f"api_key={API_KEY}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        asyncio.run(_serve(args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
