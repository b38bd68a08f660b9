"""Errors raised by the engine. They carry no HTTP knowledge; the server maps them."""


class EngineError(Exception):
    """Base class of engine errors."""


class ModelNotFoundError(EngineError, FileNotFoundError):
    """A model path or name could not be resolved to local weights."""


class ModelLoadError(EngineError):
    """Weights were found but could not be loaded."""


class PromptTooLongError(EngineError, ValueError):
    """A prompt does not fit the model's context window."""
