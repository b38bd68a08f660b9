"""API keys with roles: ``app`` asks, ``reviewer`` reviews, ``admin`` may do everything.

Keys are random (256 bits); only their SHA-256 is stored (``data_dir/keys.sqlite`` and/or the
``RAGGUARD_API_KEYS`` file), and a presented key is compared in constant time. With no key
configured authentication is off: every caller is an admin, so the app itself then serves only
callers on this machine (whatever address it was bound to), and refuses requests that a web page
elsewhere could have sent (another Host, Origin or Sec-Fetch-Site).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import Request

from guards.storage.database import Database
from guards.storage.schema_history import SchemaHistory, UnknownRevisionError, upgrade
from rag.errors import (
    AuthenticationError,
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    NotReadyError,
    PermissionDeniedError,
)

logger = logging.getLogger(__name__)

KEY_PREFIX = "rg_"

KEYS_HISTORY = SchemaHistory(
    "rag.server:key_revisions",
    version_table="ragguard_keys_revision",
    lock_id=0x6B657973,  # "keys"
)
"""The key table's Alembic history (``rag/server/key_revisions``), upgraded on start."""


class Role(enum.StrEnum):
    APP = "app"
    REVIEWER = "reviewer"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        return self is Role.ADMIN or self is needed


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's name (or, with authentication off, the X-Reviewer header)."""

    name: str
    role: Role


@dataclass(frozen=True, slots=True)
class KeyInfo:
    name: str
    role: Role
    created_at: float


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyStore:
    """The server's API keys: a table (SQLite by default, or PostgreSQL: ``url`` is a path or a
    database URL, pooled as the review store's is) plus, optionally, a read-only file of
    hashes."""

    def __init__(self, url: str | Path, keys_file: Path | None = None):
        self._db = Database(url)
        try:
            upgrade(self._db, KEYS_HISTORY)
        except UnknownRevisionError as exc:
            raise ConfigurationError(
                f"the key database is at revision {exc.found}, newer than this ragguard's "
                f"{exc.head}: upgrade ragguard (or point RAGGUARD_KEYS_DB elsewhere)"
            ) from exc
        self._file_keys = _read_keys_file(keys_file) if keys_file else []
        self._required = bool(self._all())
        """Latched: once a key has existed, revoking the last one does not switch auth off
        (every request then gets 401 until a key is created or the server restarts)."""

    def create(self, name: str, role: Role) -> str:
        """A new key for ``name``; the only time the key itself is seen."""
        if not name or len(name) > 64 or not name.replace("-", "").replace("_", "").isalnum():
            raise InvalidInputError("a key name is 1-64 letters, digits, '-' or '_'")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        self._required = True
        with self._db.transaction() as cur:
            added = cur.execute(
                "INSERT INTO keys VALUES (?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                (name, Role(role).value, hash_key(key), time.time()),
            ).rowcount
        if not added:
            raise InvalidInputError(f"a key named {name!r} exists; revoke it first")
        return key

    def revoke(self, name: str) -> None:
        with self._db.transaction() as cur:
            if not cur.execute("DELETE FROM keys WHERE name = ?", (name,)).rowcount:
                raise NotFoundError(f"no key named {name!r} (keys from the keys file are fixed)")

    def list_keys(self) -> list[KeyInfo]:
        with self._db.read() as cur:
            rows = cur.execute("SELECT name, role, created_at FROM keys ORDER BY name").fetchall()
        stored = [KeyInfo(n, Role(r), float(c)) for n, r, c in rows]
        return stored + [KeyInfo(n, r, 0.0) for n, r, _ in self._file_keys]

    def _all(self) -> list[tuple[str, Role, str]]:
        with self._db.read() as cur:
            rows = cur.execute("SELECT name, role, key_sha256 FROM keys").fetchall()
        return [(n, Role(r), h) for n, r, h in rows] + self._file_keys

    @property
    def is_enabled(self) -> bool:
        """Authentication is on as soon as one key exists, and stays on."""
        return self._required or bool(self._all())

    def verify(self, key: str) -> Principal | None:
        digest = hash_key(key)
        found = None
        for name, role, stored in self._all():  # compare with every key: no early exit
            if hmac.compare_digest(digest, stored):
                found = Principal(name, role)
        return found

    def close(self) -> None:
        self._db.close()


def _read_keys_file(path: Path) -> list[tuple[str, Role, str]]:
    keys = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or parts[1] not in Role.__members__.values() or len(parts[2]) != 64:
            raise ConfigurationError(
                f"{path} line {number}: expected 'name role sha256-hex' "
                f"(role one of {', '.join(Role)})"
            )
        keys.append((parts[0], Role(parts[1]), parts[2].lower()))
    return keys


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("x-api-key") or None


def require(role: Role) -> Callable[[Request], Principal]:
    """A dependency: the caller, when their key's role allows ``role``; else 401 or 403."""

    def dependency(request: Request) -> Principal:
        keys: KeyStore | None = request.app.state.ragguard.keys
        if keys is None:
            raise NotReadyError("the server is starting; retry shortly")
        if not keys.is_enabled:  # loopback-only development mode
            _refuse_foreign_browser_requests(request)
            name = request.headers.get("x-reviewer", "").strip()[:64] or "local"
            return Principal(name, Role.ADMIN)
        key = presented_key(request)
        if key is None:
            raise AuthenticationError(
                "send an API key: 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
            )
        principal = keys.verify(key)
        if principal is None:
            raise AuthenticationError("the API key is not valid (revoked or mistyped)")
        if not principal.role.allows(role):
            raise PermissionDeniedError(
                f"key {principal.name!r} has role {principal.role.value}; "
                f"this route needs {role.value}"
            )
        request.state.principal = principal
        return principal

    return dependency


_LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "[::1]", "testserver")
"""Host headers served without keys ("testserver" is the ASGI test client's; no public DNS
name can be it)."""
_TEST_CLIENT = "testclient"
"""The client address the ASGI test client reports: no network peer can have it."""


def _host_name(header: str) -> str:
    """The name of a Host header without its port ("[::1]:8000" -> "[::1]")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0]


def _refuse_foreign_browser_requests(request: Request) -> None:
    """Without keys every local caller is an admin, so nobody else may be one: a request from
    another machine (a server bound beyond loopback by hand), addressed to another host name
    (DNS rebinding) or sent by a browser from another site (cross-site request forgery: another
    ``Origin``, ``Origin: null``, or ``Sec-Fetch-Site``) is refused."""
    reason = _why_foreign(request)
    if reason is not None:
        raise PermissionDeniedError(f"authentication is off, so {reason}")


def _why_foreign(request: Request) -> str | None:
    client = request.client.host if request.client else None  # None: a Unix socket
    if client is not None and client != _TEST_CLIENT and not is_loopback(client):
        return (
            f"only clients on this machine are served (not {client}); create an API key "
            "(`ragguard keys create NAME --role admin`) to serve others"
        )
    host = _host_name(request.headers.get("host", ""))
    if host not in _LOCAL_HOST_NAMES:
        return (
            f"only requests addressed to localhost are served (Host: {host or 'none'}); "
            "create an API key to serve other names"
        )
    origin = request.headers.get("origin")
    if origin is not None and not _is_this_origin(origin, request.headers.get("host", "")):
        return f"requests from other web sites are refused (Origin: {origin[:100]})"
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return "requests from other web sites are refused"
    return None


def _is_this_origin(origin: str, host_header: str) -> bool:
    """Whether a browser's Origin is this server as the Host header names it ("null", sent by
    sandboxed frames and some redirects, never is)."""
    try:
        parts = urlsplit(origin.strip().lower())
        scheme, authority = parts.scheme, parts.netloc
    except ValueError:
        return False
    if scheme not in ("http", "https") or not authority or parts.path not in ("", "/"):
        return False
    default_port = ":80" if scheme == "http" else ":443"
    host = host_header.strip().lower()
    return authority.removesuffix(default_port) == host.removesuffix(default_port)


def sees_details(request: Request) -> bool:
    """Whether the caller may see what the server runs (model and index names in ``/readyz``):
    one with a valid key, or, with authentication off, a local caller."""
    keys: KeyStore | None = request.app.state.ragguard.keys
    if keys is None:
        return False
    if not keys.is_enabled:
        return _why_foreign(request) is None
    key = presented_key(request)
    return key is not None and keys.verify(key) is not None


def log_protection(keys: KeyStore) -> None:
    """Say at start-up how the server is protected; loudly when it is not."""
    if keys.is_enabled:
        logger.info("authentication: API keys required")
        return
    logger.warning(
        "AUTHENTICATION IS OFF: no API key is configured, so every caller is an admin. Only "
        "clients on this machine (loopback) are served, whatever address the server listens "
        "on; create a key (`ragguard keys create NAME --role admin`) to serve anyone else"
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1 from a dual-stack socket
    return address.is_loopback


def check_bind(host: str, keys: KeyStore) -> str:
    """Refuse to listen beyond loopback without keys; else say how the server is protected."""
    if keys.is_enabled:
        return "API keys required"
    if not is_loopback(host):
        raise ConfigurationError(
            f"refusing to listen on {host} without API keys: anyone who can reach it could "
            "read and resolve reviews. Create a key (`ragguard keys create NAME --role admin`) "
            "or listen on 127.0.0.1"
        )
    return "no API keys configured: authentication is off, listening on loopback only"
