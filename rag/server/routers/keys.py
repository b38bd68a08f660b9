"""API keys (admin only): create, list, revoke."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response

from rag.server.auth import Role
from rag.server.review_schemas import KEY_NAME_PATTERN, KeyIn, KeyOut, NewKeyOut
from rag.server.schemas import ErrorOut
from rag.server.state import KeysDep

router = APIRouter(prefix="/v1/keys", tags=["keys"])
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422, 503)
}


@router.post("", response_model=NewKeyOut, status_code=201, responses=_ERRORS)
def create_key(body: KeyIn, keys: KeysDep) -> NewKeyOut:
    """A new key; the response is the only time it is shown."""
    key = keys.create(body.name, Role(body.role))
    info = next(k for k in keys.list_keys() if k.name == body.name)
    return NewKeyOut(name=info.name, role=info.role.value, created_at=info.created_at, key=key)


@router.get("", response_model=list[KeyOut], responses=_ERRORS)
def list_keys(keys: KeysDep) -> list[KeyOut]:
    """Names and roles (never the keys)."""
    return [
        KeyOut(name=k.name, role=k.role.value, created_at=k.created_at) for k in keys.list_keys()
    ]


@router.delete("/{name}", status_code=204, responses=_ERRORS)
def revoke_key(
    name: Annotated[str, Path(max_length=64, pattern=KEY_NAME_PATTERN)], keys: KeysDep
) -> Response:
    keys.revoke(name)
    return Response(status_code=204)
