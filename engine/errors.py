"""Errors raised by the engine. They carry no HTTP knowledge; the server maps them."""


class EngineError(Exception):
    """Base class of engine errors."""


class ModelNotFoundError(EngineError, FileNotFoundError):
    """A model path or name could not be resolved to local weights."""


class ModelLoadError(EngineError):
    """Weights were found but could not be loaded."""


class PromptTooLongError(EngineError, ValueError):
    """A prompt does not fit the model's context window."""


class RemoteRequestError(EngineError, ValueError):
    """The remote server refused the request as invalid (a 4xx other than 429)."""

    def __init__(self, message: str, status_code: int):
        super().__init__(message)
        self.status_code = status_code


class RemoteBusyError(EngineError):
    """The remote server kept answering 429 (too many requests)."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineUnavailableError(RuntimeError):
    """The engine's loop has died or the engine was shut down."""


class EngineStartingError(EngineUnavailableError):
    """The generator does not serve yet but is expected to: a remote generator still starting,
    or restarting after it went down. Worth retrying after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s
