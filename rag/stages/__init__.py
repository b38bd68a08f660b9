"""The pipeline's stages: retrieve → generate → check → decide → act.

Each stage is a small unit with its collaborators injected; ``rag.pipeline.Pipeline`` composes
them, and the SDK, the server, the streaming path and ``ragguard eval`` all run the same ones.
Check and decide live in ``rag.guarding`` (the guard chain, the confidence, the policy); the act
stage's review queue is ``rag.review_desk.ReviewDesk``.
"""

from rag.stages.generate import GenerateStage, Generation, Plan
from rag.stages.retrieve import Retrieval, RetrieveStage

__all__ = ["GenerateStage", "Generation", "Plan", "Retrieval", "RetrieveStage"]
