"""``ragguard review ...`` and ``ragguard keys ...``: the review queue from the command line.

With ``--server URL`` the commands go through the HTTP API (as the key's owner, or as
``--reviewer`` when the server runs without keys); without it they open the review store of the
data directory (or ``RAGGUARD_REVIEW_DB``) directly, as ``--reviewer`` (default: ``$USER``),
who may then take escalated items as an admin would. Stored text is printed through
``rag.display.safe_text`` (``--json`` escapes it anyway). Imports are lazy so that
``ragguard --help`` stays fast.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rag.cli.console import note, out
from rag.display import safe_text

_ACTIONS = {"approve": "approve", "edit": "edit", "reject": "reject", "escalate": "escalate"}


class _Local:
    """The review store of this machine's data directory."""

    def __init__(self, args: argparse.Namespace):
        from rag.review_desk import open_review_store
        from rag.settings import Settings

        overrides = {"data_dir": args.data_dir} if args.data_dir else {}
        self.store = open_review_store(Settings(**overrides))
        self.actor = args.reviewer or os.environ.get("USER") or getpass.getuser()

    def _out(self, item: Any, audit: bool = True) -> dict[str, Any]:
        from rag.review_desk import ReviewOut

        log = self.store.audit(item.id) if audit else None
        out = ReviewOut.from_item(item, self.store.clock(), show_gold=True, audit=log)
        return out.model_dump()

    def list(self, **filters: Any) -> dict[str, Any]:
        from guards.review import Status

        raw_status = filters.pop("status", None)
        status = Status(raw_status) if raw_status else None
        overdue = filters.pop("overdue", None)
        items, total = self.store.list_items(status=status, is_overdue=overdue, **filters)
        return {"total": total, "items": [self._out(i, audit=False) for i in items]}

    def show(self, item_id: str) -> dict[str, Any]:
        return self._out(self.store.get(item_id))

    def claim(self, item_id: str | None) -> dict[str, Any] | None:
        # Whoever can open the store's file is its admin (without API keys, so is the server's
        # every caller): they may take an escalation, unless they made it.
        if item_id is None:
            item = self.store.claim_next(self.actor, is_admin=True)
            return None if item is None else self._out(item)
        return self._out(self.store.claim(item_id, self.actor, is_admin=True))

    def release(self, item_id: str) -> dict[str, Any]:
        return self._out(self.store.release(item_id, self.actor))

    def resolve(self, item_id: str, action: str, edited: str | None, ratings: dict[str, Any],
                comment: str, escalate_to: str | None = None) -> dict[str, Any]:  # fmt: skip
        from guards.review import Ratings, Resolution

        item = self.store.resolve(
            item_id, self.actor, Resolution(action), edited_answer=edited,
            ratings=Ratings(comment=comment, **ratings), escalate_to=escalate_to,
        )  # fmt: skip
        return self._out(item)

    def export(self, fmt: str, status: str | None) -> str:
        from guards.review import Status
        from rag.review_desk import export_rows, to_csv

        rows = export_rows(self.store, Status(status) if status else None, show_gold=True)
        if fmt == "csv":
            return "".join(to_csv(rows))
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


class _Remote:
    """A running server, through the SDK client."""

    def __init__(self, args: argparse.Namespace):
        from rag.client import Client

        key = args.api_key or os.environ.get("RAGGUARD_API_KEY")
        self.client = Client(args.server, api_key=key, reviewer=args.reviewer)

    def list(self, **filters: Any) -> dict[str, Any]:
        return self.client.list_reviews(**filters)

    def show(self, item_id: str) -> dict[str, Any]:
        return self.client.get_review(item_id)

    def claim(self, item_id: str | None) -> dict[str, Any] | None:
        return self.client.claim_review(item_id)

    def release(self, item_id: str) -> dict[str, Any]:
        return self.client.release_review(item_id)

    def resolve(self, item_id: str, action: str, edited: str | None, ratings: dict[str, Any],
                comment: str, escalate_to: str | None = None) -> dict[str, Any]:  # fmt: skip
        return self.client.resolve_review(
            item_id,
            action,
            edited_answer=edited,
            ratings=ratings,
            comment=comment,
            escalate_to=escalate_to,
        )

    def export(self, fmt: str, status: str | None) -> str:
        return self.client.export_reviews(format=fmt, status=status)


def _who(item: dict[str, Any]) -> str:
    """Who holds, resolved or escalated the item: 'claimed by bob; escalated by ann to admins'."""
    parts = []
    if item["status"] == "claimed" and item.get("assignee"):
        parts.append(f"claimed by {item['assignee']}")
    if item.get("resolved_at") is not None and item.get("resolved_by"):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item["resolved_at"]))
        parts.append(f"{item['resolution']} by {item['resolved_by']} at {when}")
    if item.get("escalated_by"):
        to = item.get("escalated_to") or "admins"
        parts.append(f"escalated by {item['escalated_by']} to {to}")
    return safe_text("; ".join(parts))


def _print_item(item: dict[str, Any]) -> None:
    now = time.time()
    who = _who(item)
    out(f"{item['id']}  [{item['status']}]" + (f" {who}" if who else ""))
    out(f"question: {safe_text(item['question'])}")
    out(f"answer:   {safe_text(item['answer'])}")
    if item.get("edited_answer"):
        out(f"edited:   {safe_text(item['edited_answer'])}")
    confidence = item.get("confidence")
    out(f"confidence: {'-' if confidence is None else f'{confidence:.2f}'}; "
          f"queued {(now - item['created_at']) / 60:.0f} min ago"
          + ("; OVERDUE" if item.get("is_overdue") else ""))  # fmt: skip
    for reason in item.get("reasons", []):
        out(f"  - {safe_text(reason)}")
    for g in item.get("guard_results", []):
        out(safe_text(f"  guard {g.get('name')}: {g.get('outcome')} ({g.get('reason')})"))
    for n, p in enumerate(item.get("passages", []), 1):
        out(safe_text(f"  [{n}] {p['doc_id']}: {' '.join(p['text'].split())[:160]}"))
        for sentence in p.get("cited_sentences", []):
            out(f"      cited: {safe_text(sentence)}")
    for a in item.get("audit") or []:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["at"]))
        out(safe_text(f"  audit {when} {a['actor']}: {a['action']}"))


def cmd_review(args: argparse.Namespace) -> int:
    queue: _Local | _Remote = _Remote(args) if args.server else _Local(args)
    if args.action == "list":
        page = queue.list(status=args.status or None, reason=args.reason, assignee=args.assignee,
                          overdue=True if args.overdue else None, limit=args.limit)  # fmt: skip
        if args.json:
            out(json.dumps(page, indent=2))
            return 0
        for item in page["items"]:
            conf = "-" if item["confidence"] is None else f"{item['confidence']:.2f}"
            late = " OVERDUE" if item["is_overdue"] else ""
            who = _who(item)
            out(
                f"{item['id']}  {item['status']:<9} conf {conf:<4}{late}  "
                f"{safe_text(item['question'][:70])}" + (f"  ({who})" if who else "")
            )
        note(f"({len(page['items'])} of {page['total']})")
        return 0
    if args.action == "export":
        text = queue.export(args.format, args.status)
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
        else:  # exact on a pipe or in a file; on a terminal, its controls are shown, not obeyed
            sys.stdout.write(safe_text(text) if sys.stdout.isatty() else text)
        return 0
    if args.action == "claim":
        item = queue.claim(None if args.id in (None, "next") else args.id)
        if item is None:
            out("the queue is empty")
            return 1
    elif args.action == "show":
        item = queue.show(_need_id(args))
    elif args.action == "release":
        item = queue.release(_need_id(args))
    else:
        edited = args.answer
        if args.action == "edit" and edited in (None, "-"):
            edited = sys.stdin.read()
        ratings = {k: getattr(args, k) for k in ("relevance", "fluency", "usefulness")}
        if args.escalate_to is not None and args.action != "escalate":
            from rag.errors import InvalidInputError

            raise InvalidInputError("--to goes with `ragguard review escalate` only")
        item = queue.resolve(
            _need_id(args), _ACTIONS[args.action], edited, ratings, args.comment, args.escalate_to
        )
    if args.json:
        out(json.dumps(item, indent=2))
    else:
        _print_item(item)
    return 0


def _need_id(args: argparse.Namespace) -> str:
    if not args.id:
        from rag.errors import InvalidInputError

        raise InvalidInputError(f"`ragguard review {args.action}` needs an item id")
    return str(args.id)


def cmd_keys(args: argparse.Namespace) -> int:
    from rag.server.auth import KeyStore, Role
    from rag.settings import Settings

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    keys = KeyStore(settings.keys_location(), settings.server.api_keys)
    try:
        if args.action == "create":
            key = keys.create(args.name, Role(args.role))
            out(key)
            note(f"(key {args.name!r}, role {args.role}: shown once, only its hash is kept)")
        elif args.action == "revoke":
            keys.revoke(args.name)
            out(f"revoked {args.name}")
        else:
            for info in keys.list_keys():
                out(f"{info.name}\t{info.role.value}")
    finally:
        keys.close()
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("review", help="the human review queue: list, show, claim, resolve, export")
    p.add_argument("action", choices=["list", "show", "claim", "release", "approve", "edit",
                                      "reject", "escalate", "export"])  # fmt: skip
    p.add_argument("id", nargs="?", help="review item id ('claim' without one: the most urgent)")
    p.add_argument("--server", help="a running server (e.g. http://127.0.0.1:8000)")
    p.add_argument("--api-key", help="with --server (default: RAGGUARD_API_KEY)")
    p.add_argument("--reviewer", help="your name (default $USER; with --server, no-key mode)")
    p.add_argument("--data-dir", type=Path, help="data directory (default RAGGUARD_DATA_DIR)")
    p.add_argument("--status", help="list/export: pending, claimed, approved, edited, ...")
    p.add_argument("--reason", help="list: text in the reasons")
    p.add_argument("--assignee", help="list: holder of a live claim")
    p.add_argument("--overdue", action="store_true", help="list: past the deadline only")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--answer", help="edit: the corrected answer ('-' or none: read stdin)")
    p.add_argument("--relevance", type=int, help="0-3")
    p.add_argument("--fluency", type=int, help="0-2")
    p.add_argument("--usefulness", type=int, help="0-4")
    p.add_argument("--comment", default="")
    p.add_argument("--to", dest="escalate_to", metavar="REVIEWER",
                   help="escalate: to this reviewer (default: to the admins)")  # fmt: skip
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="export format")
    p.add_argument("-o", "--output", help="export: write to this file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_review)

    p = sub.add_parser("keys", help="API keys of the server's data directory")
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("name", nargs="?", help="key name (create, revoke)")
    p.add_argument("--role", choices=["app", "reviewer", "admin"], default="reviewer")
    p.add_argument("--data-dir", type=Path, help="data directory (default RAGGUARD_DATA_DIR)")
    p.set_defaults(func=cmd_keys)
