"""Versions of each collection's calibration, and the one in force.

Writing a version and putting it in force are two steps: ``write`` stores the new version (in
force or not, with the report that accepted or refused it); ``swap`` makes it the one in force
with one upsert. A crash between the two leaves the old version in force, and every server
sharing the database reads the same one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.exc import IntegrityError

from guards.review.errors import ItemNotFoundError
from guards.risk import Recalibration
from guards.storage.database import Database


@dataclass(frozen=True, slots=True)
class CalibrationVersion:
    index_name: str
    profile: str
    version: int
    created_at: float
    labels: int
    """Labels there were when it was refitted."""
    accepted: bool
    model: Recalibration
    report: dict[str, Any]


class CalibrationBook:
    def __init__(self, db: Database, clock: Callable[[], float]):
        self.db = db
        self.clock = clock

    def in_force(self, index_name: str, profile: str) -> CalibrationVersion | None:
        """The version in force for a collection (None: the shipped confidence as is)."""
        with self.db.read() as cur:
            row = cur.execute(
                "SELECT c.index_name, c.profile, c.version, c.created_at, c.labels, c.accepted, "
                "c.model, c.report FROM calibration_in_force f JOIN calibrations c ON "
                "c.index_name = f.index_name AND c.profile = f.profile AND c.version = f.version "
                "WHERE f.index_name = ? AND f.profile = ?",
                (index_name, profile),
            ).fetchone()
        return None if row is None else _version(row)

    def newest(self, index_name: str, profile: str) -> CalibrationVersion | None:
        """The newest version written, in force or refused (the next refit is due from it)."""
        with self.db.read() as cur:
            row = cur.execute(
                "SELECT index_name, profile, version, created_at, labels, accepted, model, report "
                "FROM calibrations WHERE index_name = ? AND profile = ? "
                "ORDER BY version DESC LIMIT 1",
                (index_name, profile),
            ).fetchone()
        return None if row is None else _version(row)

    def history(self, index_name: str, profile: str) -> list[CalibrationVersion]:
        with self.db.read() as cur:
            rows = cur.execute(
                "SELECT index_name, profile, version, created_at, labels, accepted, model, report "
                "FROM calibrations WHERE index_name = ? AND profile = ? ORDER BY version",
                (index_name, profile),
            ).fetchall()
        return [_version(r) for r in rows]

    def write(
        self,
        index_name: str,
        profile: str,
        model: Recalibration,
        *,
        accepted: bool,
        report: dict[str, Any],
    ) -> int:
        """Store a new version (not yet in force); its number (one more than the newest).
        Two writers at once (servers sharing the database): the one that loses the number
        takes the next."""
        for attempt in range(5):
            try:
                return self._write(index_name, profile, model, accepted, report)
            except IntegrityError:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _write(
        self,
        index_name: str,
        profile: str,
        model: Recalibration,
        accepted: bool,
        report: dict[str, Any],
    ) -> int:
        with self.db.transaction() as cur:
            (newest,) = cur.execute(
                "SELECT COALESCE(MAX(version), 0) FROM calibrations "
                "WHERE index_name = ? AND profile = ?",
                (index_name, profile),
            ).fetchone() or (0,)
            version = int(newest) + 1
            stored = replace(model, version=version)
            cur.execute(
                "INSERT INTO calibrations VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    index_name,
                    profile,
                    version,
                    self.clock(),
                    model.seen,
                    int(accepted),
                    stored.to_json(),
                    json.dumps(report, default=str),
                ),
            )
        return version

    def swap(self, index_name: str, profile: str, version: int) -> None:
        """Put ``version`` in force (one upsert: the old one stays until it commits)."""
        with self.db.transaction() as cur:
            row = cur.execute(
                "SELECT accepted FROM calibrations WHERE index_name = ? AND profile = ? "
                "AND version = ?",
                (index_name, profile, version),
            ).fetchone()
            if row is None:
                raise ItemNotFoundError(
                    f"no calibration version {version} for index {index_name!r} ({profile})"
                )
            cur.execute(
                "INSERT INTO calibration_in_force VALUES (?, ?, ?, ?) "
                "ON CONFLICT (index_name, profile) DO UPDATE SET version = excluded.version, "
                "swapped_at = excluded.swapped_at",
                (index_name, profile, version, self.clock()),
            )


def _version(row: tuple[Any, ...]) -> CalibrationVersion:
    return CalibrationVersion(
        row[0], row[1], int(row[2]), float(row[3]), int(row[4]), bool(row[5]),
        Recalibration.from_json(row[6]), json.loads(row[7]),
    )  # fmt: skip
