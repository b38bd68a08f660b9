"""Documents of an index: add (JSON text or file upload), list, delete; and index information."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from rag.documents import SUPPORTED_SUFFIXES, Document, parse_bytes
from rag.errors import (
    InvalidInputError,
    PayloadTooLargeError,
    RagGuardError,
    UnsupportedFileTypeError,
)
from rag.server.schemas import (
    DocumentIn,
    DocumentList,
    DocumentOut,
    ErrorOut,
    IndexOut,
    IngestResponse,
)
from rag.server.state import PipelineDep, SettingsDep

router = APIRouter(prefix="/v1", tags=["documents"])

IndexQuery = Annotated[str | None, Query(description="index name; default: the server's index")]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (404, 409, 411, 413, 415, 422, 503)
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


class LengthRequiredError(RagGuardError):
    status_code = 411
    error_type = "length_required"


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
        form = await request.form(max_files=1, max_fields=4)
        upload, doc_id = form.get("file"), form.get("doc_id")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise InvalidInputError("the multipart form needs a 'file' field holding the document")
        data = await upload.read()
        if len(data) > max_bytes:
            raise PayloadTooLargeError(
                f"the file has {len(data)} bytes; at most {max_bytes} are accepted"
            )
        return parse_bytes(
            data, upload.filename, doc_id if isinstance(doc_id, str) and doc_id else None
        )
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
    request: Request, pipeline: PipelineDep, settings: SettingsDep, index: IndexQuery = None
) -> IngestResponse:
    """Add or replace a document (unchanged documents are skipped); creates the index if needed."""
    documents = await _read_documents(request, settings.max_upload_bytes)
    name = index or settings.index_name
    collection = await run_in_threadpool(pipeline.collections.get, name, create=True)
    report = await run_in_threadpool(collection.ingest, documents)
    return IngestResponse.from_report(name, report)


@router.get("/documents", response_model=DocumentList, responses=_ERRORS)
async def list_documents(
    pipeline: PipelineDep,
    settings: SettingsDep,
    index: IndexQuery = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DocumentList:
    """Documents of an index, ordered by id."""
    name = index or settings.index_name
    collection = await run_in_threadpool(pipeline.collections.get, name)
    total = collection.info().num_documents
    docs = await run_in_threadpool(collection.documents, offset=offset, limit=limit)
    return DocumentList(
        index=name,
        total=total,
        offset=offset,
        limit=limit,
        documents=[DocumentOut.from_info(d) for d in docs],
    )


@router.delete("/documents/{doc_id:path}", status_code=204, responses=_ERRORS)
async def delete_document(
    doc_id: str, pipeline: PipelineDep, settings: SettingsDep, index: IndexQuery = None
) -> Response:
    """Delete a document and its chunks."""
    collection = await run_in_threadpool(pipeline.collections.get, index or settings.index_name)
    await run_in_threadpool(collection.delete, doc_id)
    return Response(status_code=204)


@router.get("/indexes", response_model=list[IndexOut], tags=["indexes"])
async def list_indexes(pipeline: PipelineDep) -> list[IndexOut]:
    """Every index built under the server's index folder."""
    names = pipeline.collections.names()
    return [IndexOut.from_info(pipeline.collections.get(n).info()) for n in names]


@router.get("/indexes/{name}", response_model=IndexOut, tags=["indexes"], responses=_ERRORS)
async def get_index(name: str, pipeline: PipelineDep) -> IndexOut:
    """How an index was built and what it holds."""
    collection = await run_in_threadpool(pipeline.collections.get, name)
    return IndexOut.from_info(collection.info())
