"""``ragguard config``: the effective configuration, each value with where it came from (its
default, an environment variable, or the ``.env`` file), grouped as ``Settings`` holds it."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from typing import Any

from rag.cli.console import out


def cmd_config(args: argparse.Namespace) -> int:
    from dotenv import dotenv_values

    from rag.settings import Settings
    from rag.settings.sources import describe

    env_file = args.env_file
    settings = Settings(_env_file=env_file)
    dotenv = dotenv_values(env_file) if env_file and os.path.isfile(env_file) else {}
    rows = describe(settings, os.environ, dotenv)
    if args.json:
        out(json.dumps([asdict(row) for row in rows], indent=2))
        return 0
    group = None
    for row in rows:
        if row.group != group:
            out(("" if group is None else "\n") + f"[{row.group}]")
            group = row.group
        out(f"{row.variable} = {_shown(row.value)}  ({row.source})")
    return 0


def _shown(value: Any) -> str:
    return "" if value is None else json.dumps(value) if not isinstance(value, str) else value


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("config", help="print the effective settings and where each value came from")
    p.add_argument("--env-file", default=".env", help="the .env file read (default ./.env)")
    p.add_argument("--json", action="store_true", help="one JSON object per setting")
    p.set_defaults(func=cmd_config)
