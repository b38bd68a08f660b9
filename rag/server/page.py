"""The reviewer's web page at ``/review``: static HTML, CSS and JavaScript, no build step."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from rag.errors import NotFoundError

STATIC = Path(__file__).resolve().parent / "static"
_FILES = {"review.js": "text/javascript", "review.css": "text/css"}

router = APIRouter(tags=["review page"], include_in_schema=False)


@router.get("/review")
async def review_page() -> FileResponse:
    """The page itself; it talks to ``/v1/reviews`` with the key the reviewer enters."""
    return FileResponse(STATIC / "review.html", media_type="text/html")


@router.get("/review/static/{name}")
async def review_asset(name: str) -> FileResponse:
    if name not in _FILES:  # a fixed list: no path from the request reaches the file system
        raise NotFoundError(f"no asset {name!r}")
    return FileResponse(STATIC / name, media_type=_FILES[name])
