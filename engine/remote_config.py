"""``RemoteConfig``: where a remote OpenAI-compatible generator is and how to reach it (the
``openai`` backend's own configuration, kept apart from ``EngineConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    """Where the remote generator is and how to reach it."""

    base_url: str
    """The server's OpenAI base URL, e.g. ``http://host:8000/v1``."""
    model: str | None = None
    """The model to ask for; None: the first of the server's ``/v1/models``."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer``."""
    tokenizer: str | None = None
    """A local copy of the model's tokenizer: a GGUF file, a Hugging Face model directory, or
    ``default`` (the embedded SmolLM2); None: templates and counts are estimated."""
    max_model_len: int | None = None
    """Context window; None: the server's model card (``max_model_len``), else 2048."""
    timeout_s: float = 300.0
    """Longest wait for the next byte of a response."""
    max_retries: int = 3
    backoff_s: float = 0.5
    """First retry delay; doubled for each further one."""
    startup_timeout_s: float = 600.0
    """How long a server that does not answer yet may take to come up (its model list polled
    with backoff) before the client gives up on it."""
    connect_in_background: bool = False
    """Return from the constructor at once and wait for the server in a thread (the API server:
    ``/readyz`` says what it waits for); False: the constructor waits when it needs the
    server's model card."""
    extra_headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"the remote base URL must be http(s)://..., got {self.base_url!r}")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise ValueError("max_retries >= 0, timeout_s > 0 and backoff_s >= 0 are needed")
        if self.startup_timeout_s < 0:
            raise ValueError("startup_timeout_s >= 0 is needed")

    @property
    def headers(self) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {**self.extra_headers, **auth}
