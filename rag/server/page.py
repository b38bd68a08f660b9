"""The reviewer's web page at ``/review``: static HTML, CSS and JavaScript, no build step."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from rag.errors import NotFoundError

STATIC = Path(__file__).resolve().parent / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The page runs only its own script and talks only to this server: text from reviewed answers
can never run as code, and the key in the page cannot be sent elsewhere."""
_FILES = {"review.js": "text/javascript", "review.css": "text/css"}

router = APIRouter(tags=["review page"], include_in_schema=False)


@router.get("/review")
async def review_page() -> FileResponse:
    """The page itself; it talks to ``/v1/reviews`` with the key the reviewer enters."""
    return FileResponse(
        STATIC / "review.html",
        media_type="text/html",
        headers={
            "content-security-policy": CONTENT_SECURITY_POLICY,
            "x-content-type-options": "nosniff",
        },
    )


@router.get("/review/static/{name}")
async def review_asset(name: str) -> FileResponse:
    if name not in _FILES:  # a fixed list: no path from the request reaches the file system
        raise NotFoundError(f"no asset {name!r}")
    return FileResponse(STATIC / name, media_type=_FILES[name])
