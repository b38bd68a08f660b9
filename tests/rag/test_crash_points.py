"""Crash tests at every commit point: a real server (or ``ragguard ingest``) is killed with SIGKILL
in the middle of a burst of writes, then started again. Every acknowledged write must be there and
nothing may be half written: each SQLite database passes ``PRAGMA integrity_check``, the FAISS
file of the committed generation holds exactly the database's chunk vectors, and each review
item's status is the one its last audit row records.

Kill points (the parameter ``kill``): ``ack-K``, by the test after the K-th acknowledged write;
``commit-K``, by the test once the CLI's K-th commit is visible; ``POINT@N``, by the process
itself at a precise point of its N-th index write (or N-th audit row), where a kill from outside
rarely lands: inside the SQLite transaction, after its commit but before the FAISS file is
written, with the new FAISS file written but not renamed, and just after the rename.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from guards.review import NewItem, Resolution, ReviewStore
from rag.retrieval.documents import Document, parse_bytes

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 240.0  # generous: the suite shares two busy cores
SETTINGS = {
    "RAGGUARD_INDEX_NAME": "kb",
    "RAGGUARD_BUILD_DEMO_INDEX": "false",
    "RAGGUARD_LOG_LEVEL": "warning",
    "RAGGUARD_CHUNK_SIZE": "64",
    "RAGGUARD_CHUNK_OVERLAP": "8",
    "RAGGUARD_EMBED_BATCH_SIZE": "8",
    # Small groups, never stretched: one request or run commits many times.
    "RAGGUARD_INGEST_GROUP_CHUNKS": "6",
    "RAGGUARD_INGEST_MAX_COMMIT_SHARE": "0",
    "RAGGUARD_REVIEW_GOLD_RATE": "0",
}
# Runs ``ragguard ARGS`` after arming a SIGKILL of the process itself at CRASH_POINT of its
# CRASH_AT-th index write (for audit rows: at its CRASH_AT-th audit row).
HOOK = """
import os, signal, sys
from sqlalchemy import event
from guards.storage import database
from rag.retrieval import faiss_store, index
from rag.cli import main

point, at = os.environ["CRASH_POINT"], int(os.environ["CRASH_AT"])
seen = {"writes": 0, "chunk_rows": 0, "audit_rows": 0}

def die(here, number):
    if here == point and number >= at:
        os.kill(os.getpid(), signal.SIGKILL)

def trace(sql):
    if sql.startswith("INSERT INTO chunks"):
        seen["chunk_rows"] += 1
        if seen["chunk_rows"] == 2:
            die("mid-transaction", seen["writes"])
    elif sql.startswith("INSERT INTO audit_log"):
        seen["audit_rows"] += 1
        die("mid-audit", seen["audit_rows"])  # the change is made, its audit row is not

write = index.VectorIndex.write
def counted_write(self, *args, **kwargs):
    seen["writes"] += 1
    seen["chunk_rows"] = 0
    return write(self, *args, **kwargs)
index.VectorIndex.write = counted_write
connect = index.VectorIndex._connect
def traced_connect(path):
    conn = connect(path)
    conn.set_trace_callback(trace)
    return conn
index.VectorIndex._connect = staticmethod(traced_connect)
init = database.Database.__init__
def traced_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    # Every pooled connection, as the pool opens it (the engine connects lazily).
    event.listen(self.engine, "connect", lambda conn, _: conn.set_trace_callback(trace))
database.Database.__init__ = traced_init
apply = faiss_store.FaissStore.apply
def dying_apply(self, *args):
    die("after-commit", seen["writes"])
    return apply(self, *args)
faiss_store.FaissStore.apply = dying_apply
replace = os.replace
def dying_replace(src, dst, *args, **kwargs):
    if str(dst).endswith(".faiss"):
        die("faiss-unrenamed", seen["writes"])
    replace(src, dst, *args, **kwargs)
    if str(dst).endswith(".faiss"):
        die("faiss-renamed", seen["writes"])
os.replace = dying_replace
sys.exit(main(sys.argv[1:]))
"""
Writer = Callable[[httpx.Client, "Acks"], None]


def launch(tmp: Path, args: list[str], kill: str, **options: Any) -> subprocess.Popen[Any]:
    """``python -m rag.cli ARGS``, or with ``kill`` = ``POINT@N`` the same armed by ``HOOK``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGGUARD_")}
    env |= SETTINGS | {
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAGGUARD_INDEX_DIR": str(tmp / "indexes"),
        "RAGGUARD_DATA_DIR": str(tmp / "data"),
    }
    command = [sys.executable, "-m", "rag.cli", *args]
    if "@" in kill:
        point, at = kill.split("@")
        env |= {"CRASH_POINT": point, "CRASH_AT": at}
        command = [sys.executable, "-c", HOOK, *args]
    return subprocess.Popen(command, cwd=tmp, env=env, **options)


def text_of(name: str, version: int = 1) -> str:
    """About eight 64-token chunks of distinct sentences."""
    return " ".join(
        f"{name} version {version}, sentence {j}: the {j * 7 % 13}th lantern hangs by door {j}."
        for j in range(20)
    )


class Server:
    """``ragguard serve`` on a free loopback port, its log in the test's folder."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.proc: subprocess.Popen[Any] | None = None
        self.url = ""

    def start(self, kill: str = "") -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        args = ["serve", "--host", "127.0.0.1", "--port", str(port)]
        with open(self.tmp / "server.log", "ab") as log:
            self.proc = launch(self.tmp, args, kill, stdout=log, stderr=subprocess.STDOUT)

    def wait_for(self, path: str) -> None:
        """Until GET ``path`` answers 200 (the model loads in the background meanwhile)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            try:
                if httpx.get(self.url + path, timeout=30).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{path} never answered 200\n{self.log()}"
            time.sleep(0.1)

    def get(self, path: str) -> Any:
        return created(httpx.get(self.url + path, timeout=DEADLINE_S))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=60)

    def died_by_sigkill(self, grace_s: float = 30.0) -> bool:
        """Whether the server killed itself. A client sees its connection close while the
        kernel is still tearing the process down, before it can be reaped: wait for that."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=grace_s) == -signal.SIGKILL
        except subprocess.TimeoutExpired:
            return False  # still running: the writers stopped for another reason

    def log(self) -> str:
        return (self.tmp / "server.log").read_text(errors="replace")[-4000:]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path)
    yield running
    running.kill()


class Acks:
    """Acknowledged writes; with ``kill_after``, the server is killed as that many arrive."""

    def __init__(self, kill_after: int | None, kill: Callable[[], None]):
        self.records: list[tuple[Any, ...]] = []
        self._kill_after = kill_after
        self._kill = kill
        self._lock = threading.Lock()

    def add(self, *record: Any) -> None:
        with self._lock:
            self.records.append(record)
            if len(self.records) == self._kill_after:
                self._kill()


def hammer(server: Server, kill: str, ready: str, writers: list[Writer]) -> Acks:
    """Start the server armed for ``kill``, wait until GET ``ready`` answers, run the writers
    until the server dies, and start it again (unarmed); the acknowledged writes."""
    server.start(kill)
    server.wait_for(ready)
    kill_after = int(kill.removeprefix("ack-")) if kill.startswith("ack-") else None
    acks = Acks(kill_after, server.kill)
    errors: list[BaseException] = []

    def run(writer: Writer) -> None:
        with httpx.Client(base_url=server.url, timeout=DEADLINE_S) as client:
            try:
                writer(client, acks)
            except httpx.TransportError:
                pass  # the server was killed under this request
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE_S)
    died_by_itself = server.proc is not None and server.died_by_sigkill()
    server.kill()  # also when every writer ran out of work first
    assert not any(t.is_alive() for t in threads), "a writer hangs"
    assert not errors, errors
    if kill_after is None:
        assert died_by_itself, f"the server was not killed at {kill}\n{server.log()}"
    else:
        assert len(acks.records) >= kill_after, f"the writers stopped early\n{server.log()}"
    server.start()  # restarted, unarmed
    return acks


def created(response: httpx.Response) -> Any:
    assert response.status_code in (200, 201), (response.status_code, response.text)
    return response.json()


# ------------------------------------------------------------------ consistency of what is on disk
def check_databases(root: Path) -> None:
    databases = sorted(root.rglob("*.sqlite"))
    assert databases
    for path in databases:
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], path
        conn.close()


def check_index(path: Path) -> dict[str, str]:
    """The index's documents (id: content hash), after checking that each has all its chunks and
    that the FAISS file of the committed generation holds exactly their vectors."""
    import faiss

    conn = sqlite3.connect(path / "chunks.sqlite")
    generation = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]
    docs = {
        r[0]: (r[1], r[2])
        for r in conn.execute("SELECT doc_id, content_hash, num_chunks FROM documents")
    }
    rows = conn.execute("SELECT id, doc_id, ordinal, embedding FROM chunks ORDER BY id").fetchall()
    conn.close()
    ordinals: dict[str, list[int]] = {}
    for _, doc_id, ordinal, _ in rows:
        ordinals.setdefault(doc_id, []).append(ordinal)
    for doc_id, (_, num_chunks) in docs.items():
        assert sorted(ordinals.pop(doc_id, [])) == list(range(num_chunks)), doc_id
    assert not ordinals, f"chunks without their document: {sorted(ordinals)}"

    vectors = faiss.read_index(str(path / f"vectors-{generation}.faiss"))
    assert isinstance(vectors, faiss.IndexIDMap)
    ids = faiss.vector_to_array(vectors.id_map)
    stored = vectors.index.reconstruct_n(0, vectors.ntotal)
    assert sorted(ids.tolist()) == [r[0] for r in rows]
    by_id = dict(zip(ids.tolist(), stored, strict=True))
    for chunk_id, _, _, blob in rows:
        assert np.array_equal(by_id[chunk_id], np.frombuffer(blob, np.float32)), chunk_id
    return {doc_id: content_hash for doc_id, (content_hash, _) in docs.items()}


def check_reviews(db: Path) -> dict[str, str]:
    """Every item's status (id: status), after checking that it is its last audit row's."""
    conn = sqlite3.connect(db)
    statuses = dict(conn.execute("SELECT id, status FROM review_items").fetchall())
    for item_id, status in statuses.items():
        afters = [
            json.loads(r[0])
            for r in conn.execute(
                "SELECT after_state FROM audit_log WHERE item_id = ? ORDER BY id", (item_id,)
            )
            if r[0]
        ]
        with_status = [a["status"] for a in afters if "status" in a]
        assert with_status and with_status[-1] == status, (item_id, status, afters)
    conn.close()
    return statuses


# ---------------------------------------------------------------------- (a) ingestion by the API
INDEX_POINTS = ["mid-transaction@3", "after-commit@3", "faiss-unrenamed@3", "faiss-renamed@3"]


@pytest.mark.parametrize("kill", ["ack-1", "ack-6", *INDEX_POINTS])
def test_ingestion_through_the_api(server: Server, tmp_path: Path, kill: str) -> None:
    sent: dict[str, list[str]] = {}  # doc id: content hash of each version, in order
    lock = threading.Lock()

    def record(doc: Document) -> int:
        with lock:
            sent.setdefault(doc.doc_id, []).append(doc.content_hash)
            return len(sent[doc.doc_id])

    def json_writer(name: str) -> Writer:
        def write(client: httpx.Client, acks: Acks) -> None:
            for n in count():
                # Every third request replaces the previous document (delete + insert).
                doc_id = f"{name}-{n - 1 if n % 3 == 2 else n}"
                doc = Document(doc_id, text_of(doc_id, len(sent.get(doc_id, [])) + 1))
                version = record(doc)
                body = {"doc_id": doc.doc_id, "text": doc.text}
                created(client.post("/v1/documents", json=body))
                acks.add((doc_id, version))

        return write

    def jsonl_writer(client: httpx.Client, acks: Acks) -> None:
        for n in count():  # three documents per upload: a commit group each
            name = f"batch-{n}.jsonl"
            lines = [{"id": f"{name}:{i}", "text": text_of(f"{name}:{i}")} for i in range(3)]
            data = "\n".join(json.dumps(line) for line in lines).encode()
            versions = [(d.doc_id, record(d)) for d in parse_bytes(data, name)]
            created(client.post("/v1/documents", files={"file": (name, data)}))
            acks.add(*versions)

    writers = [json_writer("a"), json_writer("b"), jsonl_writer]
    acks = hammer(server, kill, "/readyz", writers)
    server.wait_for("/v1/documents?limit=1")  # the index is open again
    check_databases(tmp_path)
    stored = check_index(tmp_path / "indexes" / "kb")
    for acknowledged in acks.records:
        for doc_id, version in acknowledged:
            assert doc_id in stored, f"acknowledged {doc_id} is lost"
            assert sent[doc_id].index(stored[doc_id]) + 1 >= version, f"{doc_id} went back"
    assert all(stored[d] in sent[d] for d in stored), "a document nobody sent"
    listed = server.get("/v1/documents?limit=1000")["documents"]
    assert {d["doc_id"] for d in listed} == set(stored)


# ---------------------------------------------------------------------- (b) ingestion by the CLI
def committed(db: Path) -> tuple[int, dict[str, str]] | None:
    """(generation, documents) as a reader sees them now; None before the index exists."""
    if not db.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            docs = dict(conn.execute("SELECT doc_id, content_hash FROM documents").fetchall())
        finally:
            conn.close()
    except sqlite3.OperationalError:  # the schema is being created
        return None
    return (int(meta["generation"]), docs) if "format_version" in meta else None


@pytest.mark.parametrize("kill", ["commit-0", "commit-3", "mid-transaction@4", "faiss-unrenamed@4"])
def test_ingestion_through_the_cli(tmp_path: Path, kill: str) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(40):
        (corpus / f"doc-{i:02d}.md").write_text(text_of(f"doc-{i:02d}"))
    args = ["ingest", str(corpus), "--index", "kb", "--quiet"]
    db = tmp_path / "indexes" / "kb" / "chunks.sqlite"
    kill_at = int(kill.removeprefix("commit-")) if kill.startswith("commit-") else None

    proc = launch(tmp_path, args, kill, stdout=subprocess.DEVNULL)
    seen: tuple[int, dict[str, str]] = (0, {})  # what was visibly committed: acknowledged
    try:
        deadline = time.monotonic() + DEADLINE_S
        while proc.poll() is None:
            now = committed(db)
            seen = now or seen
            if kill_at is not None and now is not None and now[0] >= kill_at:
                os.kill(proc.pid, signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "the ingestion neither ended nor died"
            time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the ingestion ended before the kill point"

    after_kill = committed(db)
    assert after_kill is not None and after_kill[0] >= seen[0]
    assert seen[1].items() <= after_kill[1].items(), "a commit seen before the kill is lost"
    check_databases(tmp_path)

    # Running it again skips what was committed and embeds only what the kill lost.
    rerun = launch(tmp_path, args, "", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = rerun.communicate(timeout=DEADLINE_S)
    assert rerun.returncode == 0, err[-4000:]
    numbers = re.search(r"(\d+) added, (\d+) updated, (\d+) unchanged; (\d+) chunks", out)
    assert numbers, out
    added, updated, unchanged, embedded = map(int, numbers.groups())
    assert (added, updated, unchanged) == (40 - len(after_kill[1]), 0, len(after_kill[1]))
    stored = check_index(tmp_path / "indexes" / "kb")
    check_databases(tmp_path)
    assert len(stored) == 40
    conn = sqlite3.connect(db)
    placeholders = ",".join("?" * len(after_kill[1]))
    kept = conn.execute(
        f"SELECT COUNT(*) FROM chunks WHERE doc_id NOT IN ({placeholders})", list(after_kill[1])
    ).fetchone()[0]
    conn.close()
    assert embedded == kept  # the rerun embedded exactly the chunks of the lost documents


# ------------------------------------------------------------------ (c) review claims and resolves
def queue_items(db: Path, num_items: int, *, resolve: bool = False) -> list[str]:
    store = ReviewStore(db, gold_rate=0.0)
    ids = []
    for n in range(num_items):
        item = store.add(
            NewItem(f"question {n}?", f"answer {n}.", passages=[{"text": f"passage {n}"}])
        )
        if resolve:
            store.claim(item.id, "seed")
            store.resolve(item.id, "seed", Resolution.APPROVE if n % 2 else Resolution.REJECT)
        ids.append(item.id)
    store.close()
    return ids


RESOLVED = {"approve": "approved", "edit": "edited", "reject": "rejected"}


@pytest.mark.parametrize("kill", ["ack-1", "ack-7", "ack-25", "mid-audit@5"])
def test_review_claims_and_resolves(server: Server, tmp_path: Path, kill: str) -> None:
    db = tmp_path / "data" / "reviews.sqlite"
    queue_items(db, 60)

    def reviewer(name: str) -> Writer:
        def work(client: httpx.Client, acks: Acks) -> None:
            headers = {"x-reviewer": name}
            for n in count():
                item = created(client.post("/v1/reviews/next", headers=headers))
                if item is None:
                    return
                acks.add("claimed", item["id"], name)
                action = list(RESOLVED)[n % 3]
                body = {"action": action, "edited_answer": "fixed." if action == "edit" else None}
                path = f"/v1/reviews/{item['id']}/resolve"
                created(client.post(path, json=body, headers=headers))
                acks.add(RESOLVED[action], item["id"], name)

        return work

    acks = hammer(server, kill, "/v1/reviews?limit=1", [reviewer(f"r{i}") for i in range(3)])
    server.wait_for("/v1/reviews?limit=1")
    check_databases(tmp_path)
    statuses = check_reviews(db)
    for stage, item_id, name in acks.records:
        item = server.get(f"/v1/reviews/{item_id}")
        assert item["status"] == statuses[item_id]
        if stage == "claimed":  # still claimed, or resolved by a request cut off by the kill
            assert item["status"] == "claimed" or item["resolved_by"] == name, item
            assert item["status"] != "claimed" or item["assignee"] == name, item
        else:
            assert item["status"] == stage and item["resolved_by"] == name, item
            assert stage != "edited" or item["edited_answer"] == "fixed.", item
    # The restarted server goes on where the killed one stopped.
    item = created(httpx.post(server.url + "/v1/reviews/next", headers={"x-reviewer": "later"}))
    assert item is not None and item["status"] == "claimed"


# --------------------------------------------------------------------- (d) gold-item creation
@pytest.mark.parametrize("kill", ["ack-1", "ack-6", "ack-20", "mid-audit@3"])
def test_gold_item_creation(server: Server, tmp_path: Path, kill: str) -> None:
    db = tmp_path / "data" / "reviews.sqlite"
    resolved = queue_items(db, 30, resolve=True)

    def by_hand(name: str) -> Writer:
        def add(client: httpx.Client, acks: Acks) -> None:
            for n in count():
                question, answer, correct = f"{name} q{n}?", f"{name} a{n}.", n % 2 == 0
                body = {"question": question, "answer": answer, "correct": correct}
                gold_id = created(client.post("/v1/reviews/gold", json=body))["id"]
                acks.add(gold_id, question, answer, correct, None)

        return add

    def from_items(client: httpx.Client, acks: Acks) -> None:
        for n, item_id in enumerate(resolved):  # made gold: a gold row and an audit row
            gold_id = created(client.post(f"/v1/reviews/{item_id}/gold"))["id"]
            acks.add(gold_id, f"question {n}?", f"answer {n}.", n % 2 == 1, item_id)

    acks = hammer(server, kill, "/v1/reviews?limit=1", [by_hand("x"), by_hand("y"), from_items])
    server.wait_for("/v1/reviews?limit=1")
    check_databases(tmp_path)
    check_reviews(db)
    conn = sqlite3.connect(db)
    gold = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT id, question, answer, is_correct, source_item_id FROM gold_items"
        )
    }
    for gold_id, question, answer, is_correct, source in acks.records:
        assert gold.get(gold_id) == (question, answer, int(is_correct), source), gold_id
    for gold_id, (*_, source) in gold.items():  # each made from an item says so in its audit
        if source is not None:
            made = conn.execute(
                "SELECT after_state FROM audit_log WHERE item_id = ? AND action = 'made_gold'",
                (source,),
            ).fetchall()
            assert [json.loads(r[0])["gold_id"] for r in made] == [gold_id]
    conn.close()
