"""An engine client's failures in ragguard's terms: one mapping for every path that reaches the
engine (the pipeline's stages and the raw OpenAI routes alike)."""

from __future__ import annotations

import math

from engine import EngineStartingError as EngineStarting
from engine import EngineUnavailableError as EngineDown
from engine import RemoteBusyError
from rag.errors import EngineStartingError, EngineUnavailableError, OverloadedError, RagGuardError


def as_ragguard_error(exc: BaseException) -> RagGuardError | None:
    """Our error for ``exc``, or None when it has no meaning of its own to a caller (an invalid
    request stays a ``ValueError``; anything else is an engine fault)."""
    if isinstance(exc, EngineStarting):  # a remote generator still starting or reconnecting
        return EngineStartingError(str(exc), retry_after_s=max(1, math.ceil(exc.retry_after_s)))
    if isinstance(exc, EngineDown):
        return EngineUnavailableError(str(exc))
    if isinstance(exc, RemoteBusyError):  # the remote generator kept answering 429
        return OverloadedError(
            f"{exc}; retry later", retry_after_s=max(1, math.ceil(exc.retry_after_s))
        )
    return None
