"""The WebSocket Origin check compares scheme, host and port (real ASGI app, real consumer)."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from controlplane.ws_origin import origin_allowed

pytestmark = pytest.mark.django_db(transaction=True)


async def _handshake(origin: str, host: str = "localhost:8000") -> tuple[bool, int | None]:
    from controlplane.asgi import application

    headers = [(b"host", host.encode())]
    if origin:
        headers.append((b"origin", origin.encode()))
    socket = WebsocketCommunicator(application, "/ws/platform/events", headers=headers)
    connected, code = await socket.connect()
    await socket.disconnect()
    return connected, code


@pytest.mark.asyncio
async def test_a_page_on_another_port_of_the_same_host_cannot_open_a_socket() -> None:
    # Same origin, no credentials: the consumer itself refuses (its own close code)...
    _connected, by_consumer = await _handshake("http://localhost:8000")
    # ...another port of the same host (channels' check admitted it): refused before the
    # consumer runs, with the denier's code.
    assert await _handshake("http://localhost:5173") == (False, 1000) != (False, by_consumer)
    assert await _handshake("https://localhost:8000") == (False, 1000)  # another scheme


def test_the_origin_must_match_host_and_port_or_be_trusted(settings) -> None:
    assert origin_allowed(origin="http://localhost:8000", host="localhost:8000", secure=False)
    assert origin_allowed(origin="http://LOCALHOST:8000", host="localhost:8000", secure=False)
    assert origin_allowed(origin="https://cp.example.com", host="cp.example.com:443", secure=True)
    assert not origin_allowed(origin="http://localhost:5173", host="localhost:8000", secure=False)
    assert not origin_allowed(origin="http://localhost", host="localhost:8000", secure=False)
    assert not origin_allowed(origin="null", host="localhost:8000", secure=False)
    assert not origin_allowed(origin="http://localhost:99999", host="localhost", secure=False)
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.com:8443"]
    assert origin_allowed(
        origin="https://console.example.com:8443", host="localhost:8000", secure=False
    )
