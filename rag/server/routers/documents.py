"""Documents of an index: add (JSON text or file upload), list, delete; and index information."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from rag.errors import (
    InvalidInputError,
    LengthRequiredError,
    PayloadTooLargeError,
    RagGuardError,
    UnsupportedFileTypeError,
)
from rag.retrieval.documents import SUPPORTED_SUFFIXES, Document, parse_bytes
from rag.server.schemas import (
    MAX_OFFSET,
    DocumentIn,
    DocumentList,
    DocumentOut,
    ErrorOut,
    IndexName,
    IndexOut,
    IngestResponse,
)
from rag.server.state import CollectionsDep, SettingsDep

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["documents"])

IndexQuery = Annotated[
    IndexName | None, Query(description="index name; default: the server's index")
]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 411, 413, 415, 422, 503)
}

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": DocumentIn.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": ", ".join(SUPPORTED_SUFFIXES),
                        },
                        "doc_id": {"type": "string", "description": "default: the file name"},
                    },
                }
            },
        },
    }
}


async def _read_documents(request: Request, max_bytes: int) -> list[Document]:
    length = request.headers.get("content-length")
    if length is None:
        raise LengthRequiredError("send a Content-Length header with the document")
    if not length.isdigit():
        raise InvalidInputError("Content-Length must be a number")
    if int(length) > max_bytes:
        raise PayloadTooLargeError(f"the body has {length} bytes; at most {max_bytes} are accepted")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            body = DocumentIn.model_validate_json(await request.body())
        except ValidationError as exc:
            raise InvalidInputError(_validation_message(exc)) from exc
        return [Document(body.doc_id, body.text, body.metadata)]
    if content_type == "multipart/form-data":
        async with request.form(max_files=1, max_fields=4) as form:
            upload, doc_id = form.get("file"), form.get("doc_id")
            if not isinstance(upload, UploadFile) or not upload.filename:
                raise InvalidInputError(
                    "the multipart form needs a 'file' field holding the document"
                )
            data, name = await upload.read(), upload.filename
        chosen_id = doc_id if isinstance(doc_id, str) and doc_id else None
        return await run_in_threadpool(parse_bytes, data, name, chosen_id)  # PDFs parse slowly
    raise UnsupportedFileTypeError(
        f"unsupported content type {content_type or 'none'!r}: send application/json "
        "({doc_id, text, metadata}) or multipart/form-data with a 'file' field"
    )


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()
    )


@router.post(
    "/documents",
    response_model=IngestResponse,
    status_code=201,
    responses=_ERRORS,
    openapi_extra=_UPLOAD_BODY,
)
async def add_document(
    request: Request, collections: CollectionsDep, settings: SettingsDep, index: IndexQuery = None
) -> IngestResponse:
    """Add or replace a document (unchanged documents are skipped); creates the index if needed."""
    documents = await _read_documents(request, settings.server.max_upload_bytes)
    name = index or settings.retrieval.index_name
    collection = await run_in_threadpool(collections.get, name, create=True)
    report = await run_in_threadpool(collection.ingest, documents)
    return IngestResponse.from_report(name, report)


@router.get("/documents", response_model=DocumentList, responses=_ERRORS)
async def list_documents(
    collections: CollectionsDep,
    settings: SettingsDep,
    index: IndexQuery = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DocumentList:
    """Documents of an index, ordered by id."""
    name = index or settings.retrieval.index_name

    def page() -> DocumentList:
        collection = collections.get(name)
        docs = collection.documents(offset=offset, limit=limit)
        return DocumentList(
            index=name,
            total=collection.info().num_documents,
            offset=offset,
            limit=limit,
            documents=[DocumentOut.from_info(d) for d in docs],
        )

    return await run_in_threadpool(page)


@router.delete("/documents/{doc_id:path}", status_code=204, responses=_ERRORS)
async def delete_document(
    doc_id: Annotated[str, Path(max_length=512)],
    collections: CollectionsDep,
    settings: SettingsDep,
    index: IndexQuery = None,
) -> Response:
    """Delete a document and its chunks."""
    collection = await run_in_threadpool(collections.get, index or settings.retrieval.index_name)
    await run_in_threadpool(collection.delete, doc_id)
    return Response(status_code=204)


@router.get("/indexes", response_model=list[IndexOut], tags=["indexes"], responses=_ERRORS)
async def list_indexes(collections: CollectionsDep) -> list[IndexOut]:
    """Every readable index under the server's index folder (others are logged and skipped)."""

    def describe_all() -> list[IndexOut]:
        described = []
        for name in collections.names():
            try:
                described.append(IndexOut.from_info(collections.get(name).info()))
            except RagGuardError as exc:
                logger.warning("index %s is not listed: %s", name, exc)
        return described

    return await run_in_threadpool(describe_all)


@router.get("/indexes/{name}", response_model=IndexOut, tags=["indexes"], responses=_ERRORS)
async def get_index(name: Annotated[IndexName, Path()], collections: CollectionsDep) -> IndexOut:
    """How an index was built and what it holds."""
    return await run_in_threadpool(lambda: IndexOut.from_info(collections.get(name).info()))
