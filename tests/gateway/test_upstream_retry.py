"""A worker connection that breaks before any answer is sent once more, once.

The worker here is a real asyncio HTTP server that drops the first N connections right
after reading the request (as a worker closing an idle kept-alive connection does when
the gateway reuses it at that moment) and answers the rest.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway import upstream
from gateway.adapters.vllm import UPSTREAM_RETRIES, _send
from gateway.app import lifespan
from gateway.directory import WorkerView, directory
from gateway.errors import GatewayError

ANSWER = b'{"ok": true}'


async def _worker(drops: int):
    seen = {"requests": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        seen["requests"] += 1
        if seen["requests"] <= drops:
            writer.close()  # gone without a status line
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    view = WorkerView("w-retry", f"http://127.0.0.1:{port}", "m", "p", 16, 0.0)
    return server, view, seen


def _run(drops: int):
    async def go():
        await upstream.close()
        server, view, seen = await _worker(drops)
        try:
            worker, response = await _send([view], "/v1/chat/completions", {"x": 1}, {})
        except GatewayError as refused:
            return refused, seen["requests"]
        else:
            body = await response.aread()
            await response.aclose()
            directory.release(worker.name)
            return body, seen["requests"]
        finally:
            server.close()
            await upstream.close()

    return asyncio.run(go())


def _retries() -> float:
    return UPSTREAM_RETRIES.labels(reason="server_disconnected")._value.get()


@pytest.mark.django_db
def test_a_connection_dropped_before_the_answer_is_sent_once_more():
    before = _retries()
    body, requests = _run(drops=1)
    assert body == ANSWER
    assert requests == 2
    assert _retries() == before + 1
    assert directory.inflight.get("w-retry", 0) == 0


@pytest.mark.django_db
def test_a_second_break_is_a_502_and_there_is_no_third_try():
    refused, requests = _run(drops=5)
    assert isinstance(refused, GatewayError)
    assert (refused.status, refused.code) == (502, "upstream_error")
    assert requests == 2
    assert directory.inflight.get("w-retry", 0) == 0


def test_lifespan_shutdown_closes_the_worker_session():
    async def go():
        session = upstream.session()
        messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        sent: list[str] = []

        async def receive():
            return messages.pop(0)

        async def send(message):
            sent.append(message["type"])

        await lifespan({"type": "lifespan"}, receive, send)
        return session.closed, sent

    closed, sent = asyncio.run(go())
    assert closed
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
