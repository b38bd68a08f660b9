"""ragguard's checks on generated answers, the decision policy and the human review queue.

The guards (repetition, self-consistency, knowledge-graph fact checks, grounding, confidence)
arrive with their own issue; this package stands alone and never imports ``rag``.
"""
