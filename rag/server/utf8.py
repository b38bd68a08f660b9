"""JSON request bodies must be UTF-8 (RFC 8259, section 8.1): any other is refused with a 400.

Python's JSON parser would otherwise guess UTF-16 or UTF-32 from the first bytes and accept such a
body, or fail on it as "an error parsing the body". The check runs on the body as it arrives,
chunk by chunk, so nothing is buffered twice; bodies of other types (file uploads) pass as they
are.
"""

from __future__ import annotations

import codecs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag.errors import BodyEncodingError


def _is_json(scope: Scope) -> bool:
    """Whether the request's body will be read as JSON (a JSON type, or no type at all)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return True


class Utf8JsonBodies:
    """ASGI middleware: a JSON body that is not UTF-8 raises ``BodyEncodingError`` where the
    app reads it. A NUL byte counts as not UTF-8 here: JSON text in UTF-8 never holds one, and
    UTF-16 without a byte-order mark is full of them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        decoder = codecs.getincrementaldecoder("utf-8")()
        seen = 0

        async def checked_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                chunk: bytes = message.get("body", b"")
                try:
                    decoder.decode(chunk, final=not message.get("more_body", False))
                    bad = chunk.find(b"\x00")
                    if bad >= 0:
                        raise UnicodeDecodeError("utf-8", chunk, bad, bad + 1, "NUL byte")
                except UnicodeDecodeError as exc:
                    raise BodyEncodingError(
                        f"the request body is not UTF-8 (byte {seen + exc.start}): "
                        "send JSON encoded as UTF-8"
                    ) from None
                seen += len(chunk)
            return message

        await self.app(scope, checked_receive, send)
