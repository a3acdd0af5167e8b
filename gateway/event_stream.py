"""The gateway's streamed answer: Starlette's ``StreamingResponse``, watched with asyncio.

Before ASGI 2.4 (uvicorn announces 2.3) Starlette streams inside an anyio task group
that also listens for the client leaving; the same two jobs as two asyncio tasks cost
less per stream, and behave alike: the client leaving cancels the stream (the relay's
``finally`` books what was streamed), a failing stream raises, the outer task being
cancelled cancels both.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EventStreamResponse(StreamingResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self.stream_response(send))
        watching = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait((streaming, watching), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watching, streaming):
                if not task.done():
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            with contextlib.suppress(asyncio.CancelledError):
                await streaming  # raises what the stream raised
        if self.background is not None:
            await self.background()
