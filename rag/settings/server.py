"""Server settings: admission, deadlines, degrading under load, the answer cache, keys, Ray."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from rag.settings.base import Group, empty_is_none

MAX_QUESTION_CHARS = 2000
"""The longest question the HTTP API accepts, as its schema states; ``max_question_chars``
may lower the limit, not raise it."""


class ServerSettings(Group):
    """The API server: admission, deadlines, degrading under load, the answer cache, keys, Ray."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    worker_threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="threads the server runs blocking stage work in (retrieval, guards); "
        "fewer leave the event loop fewer competitors for the interpreter lock; empty: "
        "Python's default (cores + 4, at most 32)",
    )
    request_timeout_s: float | None = Field(
        300.0,
        gt=0,
        description="deadline of one question (a request may ask for less); past it the "
        "generation stops and the server answers 504. Empty: no deadline",
    )
    max_concurrent_questions: int = Field(
        16, ge=1, le=4096, description="questions the server works on at once"
    )
    max_waiting_questions: int = Field(
        16,
        ge=0,
        le=100_000,
        description="questions that may wait for a free slot; beyond that the server answers "
        "429 with Retry-After",
    )
    adaptive_concurrency: bool = Field(
        True,
        description="the server finds how many questions at once it can work on without "
        "slowing each, up to max_concurrent_questions (false: always max_concurrent_questions)",
    )
    max_queue_wait_s: float | None = Field(
        15.0,
        gt=0,
        description="a question predicted to wait longer than this for a slot is refused with "
        "429 and Retry-After. Empty: no bound",
    )
    max_queue_wait_services: float | None = Field(
        None,
        gt=0,
        description="... or longer than this many times the time a question takes at low load "
        "(measured; 1: about one answer's time at most). Empty (the default): no such bound",
    )
    shutdown_grace_s: float = Field(
        30.0, ge=0, description="on shutdown, how long in-flight questions may still finish"
    )
    max_upload_bytes: int = Field(20 * 1024 * 1024, ge=1, description="largest accepted upload")
    max_question_chars: int = Field(
        MAX_QUESTION_CHARS,
        ge=1,
        le=MAX_QUESTION_CHARS,
        description="longest accepted question",
    )
    degrade_waiting: int = Field(
        4,
        ge=0,
        description="questions waiting for a slot at which answers drop their extra samples; "
        "twice as many also skip the judge (0: not by queue length)",
    )
    degrade_queue_s: float = Field(
        5.0,
        ge=0.0,
        description="recent wait for a slot (seconds) at which answers drop their extra "
        "samples; twice as long also skips the judge (0: not by queue time)",
    )
    answer_cache_ttl_s: float = Field(
        3600.0,
        ge=0.0,
        description="serve an answer that went out unreviewed again, for this long, to the same "
        "question asked the same way of the same index content (0: off)",
    )
    keys_db: str | None = Field(
        None,
        description="the API key store: a SQLite path or postgresql://... URL (the review "
        "store's own database may be given); default data_dir/keys.sqlite",
    )
    api_keys: Path | None = Field(
        None, description="file of API keys (name role sha256) in addition to data_dir/keys"
    )
    build_demo_index: bool = Field(
        True, description="build the packaged demo index on start if missing"
    )
    ray_address: str | None = Field(
        None,
        description="serve --ray: the Ray cluster to join (e.g. ray://head:10001); empty = "
        "a local one",
    )
    ray_api_replicas: int = Field(
        1, ge=1, le=256, description="serve --ray: API replicas (the minimum when autoscaling)"
    )
    ray_engine_replicas: int = Field(1, ge=1, le=256, description="serve --ray: engine replicas")
    ray_autoscale_max_replicas: int | None = Field(
        None, ge=1, le=256, description="serve --ray: autoscale the API replicas up to this many"
    )
    ray_target_ongoing_requests: float = Field(
        2.0, gt=0, description="serve --ray: autoscaling's target of requests per API replica"
    )
    ray_cpus_per_replica: float = Field(
        0.5, ge=0, description="serve --ray: CPUs Ray reserves for each replica"
    )

    _empty_is_none = field_validator(
        "request_timeout_s", "max_queue_wait_s", "max_queue_wait_services", mode="before"
    )(empty_is_none)
