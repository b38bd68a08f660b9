"""Grounded question answering."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from rag.server.schemas import AskRequest, AskResponse, ErrorOut
from rag.server.state import PipelineDep

router = APIRouter(prefix="/v1", tags=["ask"])


@router.post(
    "/ask",
    response_model=AskResponse,
    responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}, 503: {"model": ErrorOut}},
)
async def ask(body: AskRequest, request: Request, pipeline: PipelineDep) -> AskResponse:
    """Retrieve passages for the question and answer from them, with numbered citations.

    When no passage clears the relevance threshold the answer abstains without calling the model.
    """
    result = await run_in_threadpool(
        partial(pipeline.ask_with, request_id=request.state.request_id),
        body.question,
        body.to_options(),
    )
    return AskResponse.from_result(result)
