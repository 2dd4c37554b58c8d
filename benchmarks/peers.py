"""The clients under comparison, each doing the same call the way its users write it.

Every peer sends the same JSON body as sensorium (`{"model", "query"[, "events"]}`) with the same
`Authorization: Bearer` header, checks the status, parses the body and returns what sensorium
returns: the first output string of a reasoner query, or the (channels, 768) float32 array of an
encoder query. Each peer keeps one client object (and so one connection pool) for its whole run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import numpy as np

REASONER = "Reasoner::c2_4_7b_251215a172f6d7"
ENCODER = "Encoder::encoder_embeddings_01"
PROMPT = "Summarise the shift log in one sentence."
NUMERIC = "data.numeric_array"


@dataclass
class Target:
    base_url: str  # as the server printed it; sensorium derives its versioned base from it
    query_url: str  # {versioned base}/query, what the peers post to
    api_key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@dataclass
class SyncPeer:
    name: str
    call: Callable[[], Any]
    close: Callable[[], None]


@dataclass
class AsyncPeer:
    name: str
    call: Callable[[], Awaitable[Any]]
    close: Callable[[], Awaitable[None]]


def _text(doc: dict) -> str:
    return doc["response"]["response"][0]


def _vectors(doc: dict) -> np.ndarray:
    return np.asarray(doc["response"]["response"], dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Bodies for the encoder call: each JSON library serialises the window its own way.


def encoder_payload(contents: Any) -> dict:
    return {"model": ENCODER, "query": "", "events": [{"type": NUMERIC, "event_data": {"contents": contents}}]}


def body_json(window: np.ndarray) -> bytes:
    return json.dumps(encoder_payload(window.tolist())).encode()


def body_orjson(window: np.ndarray) -> bytes:
    import orjson

    return orjson.dumps(encoder_payload(window), option=orjson.OPT_SERIALIZE_NUMPY)


def parse_json(raw: bytes) -> np.ndarray:
    return _vectors(json.loads(raw))


def parse_orjson(raw: bytes) -> np.ndarray:
    import orjson

    return _vectors(orjson.loads(raw))


# ---------------------------------------------------------------------------------------------
# Reasoner query: one client per library.

QUERY_BODY = {"model": REASONER, "query": PROMPT}


def sync_query_peers(t: Target) -> list[SyncPeer]:
    import httpx
    import pyreqwest.client
    import requests
    import requests.adapters

    import sensorium

    peers = []
    sc = sensorium.Client(api_key=t.api_key, base_url=t.base_url, max_retries=0)
    peers.append(SyncPeer("sensorium.Client", lambda: sc.query(REASONER, PROMPT).text, sc.close))

    hc = httpx.Client(headers=t.auth, limits=httpx.Limits(max_connections=128, max_keepalive_connections=128))

    def httpx_call() -> str:
        r = hc.post(t.query_url, json=QUERY_BODY)
        r.raise_for_status()
        return _text(r.json())

    peers.append(SyncPeer("httpx.Client", httpx_call, hc.close))

    rs = requests.Session()
    rs.headers.update(t.auth)
    # One pool sized for the 64-thread run; the default (10) would make threads open throwaway
    # connections, which is a configuration difference, not a library one.
    rs.mount("http://", requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=128))

    def requests_call() -> str:
        r = rs.post(t.query_url, json=QUERY_BODY)
        r.raise_for_status()
        return _text(r.json())

    peers.append(SyncPeer("requests.Session", requests_call, rs.close))

    pc = pyreqwest.client.SyncClientBuilder().default_headers(t.auth).error_for_status(True).build()

    def pyreqwest_call() -> str:
        return _text(pc.post(t.query_url).body_json(QUERY_BODY).build().send().json())

    peers.append(SyncPeer("pyreqwest.SyncClient", pyreqwest_call, pc.close))
    return peers


async def async_query_peers(t: Target) -> list[AsyncPeer]:
    """Must be awaited inside the event loop the calls will run on."""
    import aiohttp
    import httpx
    import pyreqwest.client

    import sensorium

    peers = []
    sc = sensorium.AsyncClient(api_key=t.api_key, base_url=t.base_url, max_retries=0)

    async def sensorium_call() -> str:
        return (await sc.query(REASONER, PROMPT)).text

    peers.append(AsyncPeer("sensorium.AsyncClient", sensorium_call, sc.aclose))

    session = aiohttp.ClientSession(headers=t.auth, connector=aiohttp.TCPConnector(limit=128))

    async def aiohttp_call() -> str:
        async with session.post(t.query_url, json=QUERY_BODY) as r:
            r.raise_for_status()
            return _text(await r.json())

    peers.append(AsyncPeer("aiohttp", aiohttp_call, session.close))

    hc = httpx.AsyncClient(headers=t.auth, limits=httpx.Limits(max_connections=128, max_keepalive_connections=128))

    async def httpx_call() -> str:
        r = await hc.post(t.query_url, json=QUERY_BODY)
        r.raise_for_status()
        return _text(r.json())

    peers.append(AsyncPeer("httpx.AsyncClient", httpx_call, hc.aclose))

    pc = pyreqwest.client.ClientBuilder().default_headers(t.auth).error_for_status(True).build()

    async def pyreqwest_call() -> str:
        r = await pc.post(t.query_url).body_json(QUERY_BODY).build().send()
        return _text(await r.json())

    peers.append(AsyncPeer("pyreqwest.Client", pyreqwest_call, pc.close))
    return peers


# ---------------------------------------------------------------------------------------------
# Encoder query end to end: serialise the window, send, parse into a float32 array.


def sync_embed_peers(t: Target, window: np.ndarray) -> list[SyncPeer]:
    import httpx
    import orjson
    import pyreqwest.client
    import requests

    import sensorium

    peers = []
    sc = sensorium.Client(api_key=t.api_key, base_url=t.base_url, max_retries=0)
    peers.append(SyncPeer("sensorium.Client.embed", lambda: sc.embed(ENCODER, window).vectors, sc.close))

    for label, dumps, parse in (("json", body_json, parse_json), ("orjson", body_orjson, parse_orjson)):
        hc = httpx.Client(headers={**t.auth, "Content-Type": "application/json"})

        def httpx_call(hc: Any = hc, dumps: Callable = dumps, parse: Callable = parse) -> np.ndarray:
            r = hc.post(t.query_url, content=dumps(window))
            r.raise_for_status()
            return parse(r.content)

        peers.append(SyncPeer(f"httpx + {label}", httpx_call, hc.close))

    rs = requests.Session()
    rs.headers.update({**t.auth, "Content-Type": "application/json"})

    def requests_call() -> np.ndarray:
        r = rs.post(t.query_url, data=body_json(window))
        r.raise_for_status()
        return parse_json(r.content)

    peers.append(SyncPeer("requests + json", requests_call, rs.close))

    pc = (
        pyreqwest.client.SyncClientBuilder()
        .default_headers({**t.auth, "Content-Type": "application/json"})
        .error_for_status(True)
        .build()
    )

    def pyreqwest_call() -> np.ndarray:
        r = pc.post(t.query_url).body_bytes(body_orjson(window)).build().send()
        return _vectors(orjson.loads(memoryview(r.bytes())))

    peers.append(SyncPeer("pyreqwest.SyncClient + orjson", pyreqwest_call, pc.close))
    return peers


async def async_embed_peers(t: Target, window: np.ndarray) -> list[AsyncPeer]:
    import aiohttp
    import orjson
    import pyreqwest.client

    import sensorium

    peers = []
    sc = sensorium.AsyncClient(api_key=t.api_key, base_url=t.base_url, max_retries=0)

    async def sensorium_call() -> np.ndarray:
        return (await sc.embed(ENCODER, window)).vectors

    peers.append(AsyncPeer("sensorium.AsyncClient.embed", sensorium_call, sc.aclose))

    for label, dumps, parse in (("json", body_json, parse_json), ("orjson", body_orjson, parse_orjson)):
        session = aiohttp.ClientSession(headers={**t.auth, "Content-Type": "application/json"})

        async def aiohttp_call(
            session: Any = session, dumps: Callable = dumps, parse: Callable = parse
        ) -> np.ndarray:
            async with session.post(t.query_url, data=dumps(window)) as r:
                r.raise_for_status()
                return parse(await r.read())

        peers.append(AsyncPeer(f"aiohttp + {label}", aiohttp_call, session.close))

    pc = (
        pyreqwest.client.ClientBuilder()
        .default_headers({**t.auth, "Content-Type": "application/json"})
        .error_for_status(True)
        .build()
    )

    async def pyreqwest_call() -> np.ndarray:
        r = await pc.post(t.query_url).body_bytes(body_orjson(window)).build().send()
        return _vectors(orjson.loads(memoryview(await r.bytes())))

    peers.append(AsyncPeer("pyreqwest.Client + orjson", pyreqwest_call, pc.close))
    return peers
