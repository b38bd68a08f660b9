"""Answers the policy sends to people. This is the minimal durable store; the review workflow
(claims, roles, audit trail, reviewer page) builds on it."""

from guards.review.store import ReviewStore

__all__ = ["ReviewStore"]
