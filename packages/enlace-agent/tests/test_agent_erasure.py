"""Erased means erased (issue 37): what a person forgets, corrects or deletes leaves no byte of
its text in the history file, its WAL (`web.sqlite3-wal`), its shared-memory file or the
memories' full-text index, on every path (the page's forget, correction, forget-all and
conversation deletion, `memory forget`, `delete-history`), after the health check too, and while
another connection to the file stays open."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from enlace_agent.cli.assistant import main as assistant_main


def left_in(database: Path, word: str) -> list[str]:
    """The files of the history (the database, -wal, -shm) whose raw bytes still hold `word`
    (any case: the full-text index keeps words lower case and without accents)."""
    files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
    return [f.name for f in files if f.exists() and word.encode() in f.read_bytes().lower()]


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Callable[[Path], sqlite3.Connection]]:
    """`open(database)`: another connection to the history, left open (idle) for the test."""
    opened: list[sqlite3.Connection] = []

    def open_reader(database: Path) -> sqlite3.Connection:
        db = sqlite3.connect(database)
        db.execute("SELECT count(*) FROM memories").fetchall()
        opened.append(db)
        return db

    yield open_reader
    for db in opened:
        db.close()


def test_forgotten_corrected_and_deleted_text_leaves_no_byte_behind(
    web_page: Callable[..., Any],
    model_server: Any,
    in_process: Callable[..., Any],
    reader: Callable[[Path], sqlite3.Connection],
    tmp_path: Path,
) -> None:
    database = tmp_path / "web.sqlite3"
    page = web_page()
    ana, bruno = page.login("Ana"), page.login("Bruno")
    other = reader(database)
    page.client().get("/api/health")  # its connection must not hold old frames in the WAL

    # The page's forget, after the health check.
    mine = ana.post("/api/memories", json={"text": "Mi tortuga se llama Quelonio"}).json()
    assert left_in(database, "quelonio")  # the probe sees a word that is there
    assert ana.request("DELETE", f"/api/memories/{mine['memory']['id']}", json={}).is_success
    assert left_in(database, "quelonio") == []

    # A correction keeps no old words (a household memory, corrected by another person).
    cat = ana.post("/api/memories", json={"text": "El gato es Pimpinela", "scope": "familia"})
    fixed = bruno.patch(f"/api/memories/{cat.json()['memory']['id']}", json={"text": "Es Tom"})
    assert fixed.is_success and left_in(database, "pimpinela") == []

    # The page's forget-all.
    ana.post("/api/memories", json={"text": "Ana colecciona ornitorrincos"})
    assert ana.post("/api/memories/forget-all", json={"confirm": "BORRAR"}).is_success
    assert left_in(database, "ornitorrinco") == []

    # A conversation's deletion (the question, the answer and the model's history).
    model_server.script = [model_server.say("Los hipopótamos nadan poco, Ana.")]
    [cid] = page.answered(ana, "¿Nadan los hipopotamos?")
    assert left_in(database, "hipop")
    assert ana.request("DELETE", f"/api/conversations/{cid}", json={}).is_success
    assert left_in(database, "hipop") == []

    # `memory forget` and `delete-history` at the command line, the page still running.
    config = tmp_path / "assistant.yaml"
    web = {"database": str(database), "people": [{"name": "Ana"}, {"name": "Bruno"}]}
    config.write_text(json.dumps({"web": web}))
    memory = ("memory", "add", "Ana", "Ana guarda un armadillo", "--config", str(config))
    assert in_process(assistant_main, *memory).returncode == 0
    number = ana.get("/api/memories").json()["memories"][0]["id"]
    forget = ("memory", "forget", "Ana", str(number), "--config", str(config))
    assert in_process(assistant_main, *forget).returncode == 0
    assert left_in(database, "armadillo") == []
    bruno.post("/api/memories", json={"text": "Bruno toca el contrabajo"})
    model_server.script = [model_server.say("Vale.")]
    page.answered(bruno, "Apunta que me gusta el baloncesto")
    delete = ("delete-history", "Bruno", "--yes", "--config", str(config))
    assert in_process(assistant_main, *delete).returncode == 0
    assert left_in(database, "contrabajo") == [] and left_in(database, "baloncesto") == []

    # What stays is still there, for the page and for the other connection.
    assert [m["text"] for m in ana.get("/api/memories").json()["memories"]] == ["Es Tom"]
    with closing(other.execute("SELECT text FROM memories")) as rows:
        assert [r[0] for r in rows] == ["Es Tom"]


def test_an_answer_that_used_a_memory_keeps_none_of_its_old_words(
    web_page: Callable[..., Any],
    model_server: Any,
    reader: Callable[[Path], sqlite3.Connection],
    tmp_path: Path,
) -> None:
    """«Recordé» under an answer follows the memory: corrected, its new words; forgotten, gone."""
    database = tmp_path / "web.sqlite3"
    page = web_page()
    ana = page.login("Ana")
    reader(database)
    dog = ana.post("/api/memories", json={"text": "El perro se llama Zumbido"}).json()["memory"]
    cat = ana.post("/api/memories", json={"text": "El perro come pienso Galopante"}).json()
    model_server.script = [model_server.say("Tu perro se llama así.")]
    [cid] = page.answered(ana, "¿Cómo se llama mi perro?")
    used = ana.get(f"/api/conversations/{cid}").json()["messages"][1]["memories"]
    assert sorted(m["text"] for m in used) == [cat["memory"]["text"], dog["text"]]
    assert ana.patch(f"/api/memories/{dog['id']}", json={"text": "El perro es Rayo"}).is_success
    assert left_in(database, "zumbido") == []
    assert ana.request("DELETE", f"/api/memories/{cat['memory']['id']}", json={}).is_success
    assert left_in(database, "galopante") == []
    used = ana.get(f"/api/conversations/{cid}").json()["messages"][1]["memories"]
    assert used == [{"id": dog["id"], "text": "El perro es Rayo", "scope": "personal"}]
