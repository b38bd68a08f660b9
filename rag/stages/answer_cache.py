"""The answer cache: a common question asked again the same way, within the TTL, gets the answer
that went out before, without generating or checking it again.

Only answers the policy let through unreviewed are kept (never one withheld or waiting for a
reviewer), under a key made of everything that shaped them: the index and its content version,
the normalised question, the settings (model, prompt, retrieval, decoding, guards: a hash of
them all), the request's options and the collection's calibration and certified threshold. So an
ingest or a delete (a new content version), a new calibration, or another setting misses. The
rows live in the review store (``guards.review.delivered``): replicas sharing one database share
the cache, and a reviewer who rejects or edits an answer withdraws it for all of them at once.

A cache that fails (the review database down) is a miss, never a failed answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import asdict, replace

from sqlalchemy.exc import SQLAlchemyError

from guards import Action
from guards.review import ItemNotFoundError, ReviewError, ReviewStore
from guards.review.models import normalize_question
from rag.review_desk.risk import RiskControl
from rag.settings import Settings
from rag.types import AskOptions, Result

logger = logging.getLogger(__name__)

_NOT_IN_KEY = {"answer_cache_ttl_s"}
"""Settings that do not shape an answer (everything else does, to be safe)."""
_OPTIONS_NOT_IN_KEY = {"index", "timeout_s"}


def settings_fingerprint(settings: Settings) -> str:
    """A hash of every setting that may shape an answer."""
    values = {k: v for k, v in settings.flat(mode="json").items() if k not in _NOT_IN_KEY}
    values["effective_system_prompt"] = settings.effective_system_prompt()
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class AnswerCache:
    """Answers that went out, served again for ``answer_cache_ttl_s`` (0: off)."""

    def __init__(self, store: ReviewStore, settings: Settings):
        self.store = store
        self.ttl_s = settings.server.answer_cache_ttl_s
        self._fingerprint = settings_fingerprint(settings) if self.ttl_s > 0 else ""
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0

    def key(
        self, question: str, index: str, version: str, options: AskOptions, judgement: object
    ) -> str:
        """The cache key of a question asked of ``index`` at content ``version`` with
        ``options``; ``judgement``: what the collection's decision rests on (its calibration
        version and certified threshold)."""
        opts = {k: v for k, v in asdict(options).items() if k not in _OPTIONS_NOT_IN_KEY}
        parts = [
            self._fingerprint,
            index,
            version,
            normalize_question(question),
            json.dumps(opts, sort_keys=True),
            repr(judgement),
        ]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def find(
        self,
        question: str,
        index: str,
        version: str,
        options: AskOptions,
        request_id: str,
        risk: RiskControl,
    ) -> tuple[str | None, Result | None]:
        """The key of this question (``key``, with the collection's calibration version and
        certified threshold from ``risk``) and what the cache holds under it (``lookup``); None
        and None when the cache is off."""
        if not self.enabled:
            return None, None
        state = risk.state(index)
        threshold = state.choice.threshold if state.choice is not None else None
        key = self.key(question, index, version, options, (state.version, threshold))
        return key, self.lookup(key, request_id)

    def lookup(self, key: str, request_id: str) -> Result | None:
        """The cached answer as this request's result (its own id; ``cached_from`` names the
        answer that went out first), or None."""
        try:
            cached = self.store.delivered.get(key)
        except (ReviewError, SQLAlchemyError) as exc:
            logger.warning("the answer cache could not be read (%s): generating", exc)
            cached = None
        with self._lock:
            if cached is None:
                self.misses += 1
            else:
                self.hits += 1
        if cached is None:
            return None
        self._record(cached.answer_id, request_id)
        result = Result.from_dict(cached.result)
        return replace(
            result,
            request_id=request_id,
            cached_from=cached.answer_id,
            review_id=None,
            timings={},
            decision_reasons=[
                *result.decision_reasons,
                f"served from the answer cache (answer {cached.answer_id})",
            ],
        )

    def _record(self, first_id: str, request_id: str) -> None:
        """Feedback on the served copy is feedback on the same answer: record it under this
        request's id too (as the act stage recorded the first)."""
        try:
            first = self.store.labels.answer(first_id)
            self.store.labels.record_answer(replace(first, id=request_id))
        except ItemNotFoundError:  # recorded by no act stage (guards off): no feedback by id
            pass
        except (ReviewError, SQLAlchemyError) as exc:
            logger.warning("answer %s was not recorded for feedback (%s)", request_id, exc)

    def remember(self, key: str, result: Result, version: str) -> bool:
        """Keep ``result`` if it went out unreviewed; whether it was kept."""
        if (
            not self.enabled
            or result.decision is not Action.ANSWER
            or result.abstained
            or result.review_id is not None
            or result.degraded  # a full answer, not one made with less work under load
        ):
            return False
        try:
            return self.store.delivered.put(
                key,
                index_name=result.index,
                index_version=version,
                question=result.question,
                answer_id=result.request_id,
                answer=result.answer,
                result=result.to_dict(),
                ttl_s=self.ttl_s,
            )
        except (ReviewError, SQLAlchemyError) as exc:
            logger.warning("answer %s was not cached (%s)", result.request_id, exc)
            return False
