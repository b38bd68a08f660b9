"""The pipeline's stages: retrieve → generate → check → decide → act.

Each stage is a small unit with its collaborators injected, taking and handing on typed values;
``rag.pipeline.Pipeline`` composes them, and the SDK, the server, the streaming path and
``ragguard eval`` all run the same ones. The check stage is a package (``check``: the checker,
the judge, self-verification); ``question`` holds one question on its way through them and
builds its ``Result``; the act stage queues into the review desk (``rag.review_desk``).
"""

from rag.stages.act import ActStage
from rag.stages.check import Check, CheckStage
from rag.stages.decide import DecideStage, Judged
from rag.stages.generate import GenerateStage, Generation, Plan
from rag.stages.retrieve import Retrieval, RetrieveStage

__all__ = [
    "ActStage",
    "Check",
    "CheckStage",
    "DecideStage",
    "GenerateStage",
    "Generation",
    "Judged",
    "Plan",
    "Retrieval",
    "RetrieveStage",
]
