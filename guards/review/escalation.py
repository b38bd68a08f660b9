"""Escalations go to someone else: who may claim an escalated item, and who may be named.

Escalating records who escalated (``escalated_by``) and to whom (``escalated_to``; None: to the
admins). Until the item is resolved, the reviewer who escalated it may not claim it back; only
the named reviewer or an admin may claim it (without API keys every caller is an admin, so then
anyone but the one who escalated it). Both columns stay on the resolved item as its history.
"""

from __future__ import annotations

from typing import Any

from guards.review.errors import EscalatedElsewhereError, InvalidReviewError

MAX_NAME = 64
"""Longest reviewer name an escalation may name (the length of an API key's name)."""
ADMINS = "admins"
"""How an escalation to no one in particular reads."""


def target_of(actor: str, escalate_to: str | None) -> str | None:
    """The reviewer an escalation names, checked: not the actor, a short printable name."""
    if escalate_to is None:
        return None
    name = escalate_to.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise InvalidReviewError(
            f"escalate_to must be a reviewer's name of 1-{MAX_NAME} printable characters"
        )
    if name == actor:
        raise InvalidReviewError("escalate to another reviewer (or to the admins), not to yourself")
    return name


def claim_clause(actor: str, is_admin: bool) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition (and its parameters) under which ``actor`` may claim a row: it carries
    no escalation, or one ``actor`` did not make and that is theirs (named, or they are an
    admin)."""
    if is_admin:
        return "(escalated_by IS NULL OR escalated_by <> ?)", (actor,)
    return "(escalated_by IS NULL OR (escalated_by <> ? AND escalated_to = ?))", (actor, actor)


def describe(escalated_by: str | None, escalated_to: str | None) -> str:
    """'escalated by ann to bob' (or 'to admins'); empty when never escalated."""
    if escalated_by is None:
        return ""
    return f"escalated by {escalated_by} to {escalated_to or ADMINS}"


def refusal(row: dict[str, Any], item_id: str, actor: str) -> EscalatedElsewhereError | None:
    """Why ``actor`` may not claim this open row because of its escalation, if that is why."""
    by, to = row.get("escalated_by"), row.get("escalated_to")
    if by is None:
        return None
    if by == actor:
        return EscalatedElsewhereError(
            f"you ({actor}) escalated item {item_id} to {to or ADMINS}: someone else decides it"
        )
    return EscalatedElsewhereError(
        f"item {item_id} was {describe(by, to)}: only {to + ' or ' if to else ''}an admin may "
        "claim it"
    )
