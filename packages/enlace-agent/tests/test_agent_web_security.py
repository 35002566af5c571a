"""The family page's defences against a hostile web page and a shared machine (issue 26, points
1-4), on 127.0.0.1 with real uvicorn and real SQLite: only the page's own host names and origins
(DNS rebinding), sessions tied to each person's token, a private history folder, and the security
headers and Spanish JSON bodies on every response."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from enlace_config.schema.agent import WebConfig
from pydantic import ValidationError

from enlace_agent.household import store_for
from enlace_agent.household.schema import MIGRATIONS
from enlace_agent.web import Store, guard

OLD_TOKEN = "ana-old-token-0123456789"
NEW_TOKEN = "ana-new-token-9876543210"
TOKEN_PEOPLE = [{"name": "Ana", "token_env": "TOKEN_ANA"}, {"name": "Bruno"}]


def port_of(page: Any) -> int:
    return int(page.base.rsplit(":", 1)[1])


def as_host(page: Any, host: str, origin: str | None = None) -> dict[str, str]:
    """Headers of a request that names `host` (and comes from `origin`) but reaches this page."""
    headers = {"Host": host.format(port=port_of(page))}
    if origin is not None:
        headers["Origin"] = origin.format(port=port_of(page))
    return headers


# ------------------------------------------------------------------- 1. DNS rebinding


def test_the_issues_rebinding_attack_gets_no_session(web_page: Callable[..., Any]) -> None:
    page = web_page()  # the default: loopback, people without a token
    # curl -H "Host: rebind.example:PORT" -H "Origin: http://rebind.example:PORT"
    #      -H 'Content-Type: application/json' -d '{"name":"Ana"}' http://127.0.0.1:PORT/api/login
    attacker = page.client()
    headers = as_host(page, "rebind.example:{port}", "http://rebind.example:{port}")
    login = attacker.post(
        "/api/login",
        content=b'{"name":"Ana"}',
        headers={**headers, "Content-Type": "application/json"},
    )
    assert login.status_code == 421, login.text
    assert "set-cookie" not in login.headers
    assert login.json() == {"error": guard.HOST_REFUSED}
    # Nothing else answers under that name either, reads included, with or without Origin.
    ana = page.login("Ana")
    for path in ("/", "/api/people", "/api/me", "/api/conversations", "/static/app.js"):
        for named in (headers, as_host(page, "rebind.example:{port}")):
            refused = ana.get(path, headers=named)
            assert refused.status_code == 421, path
            assert refused.json() == {"error": guard.HOST_REFUSED}
    assert "Ana" not in ana.get("/api/people", headers=headers).text


def test_only_the_pages_own_names_are_answered(web_page: Callable[..., Any]) -> None:
    page = web_page()
    client = page.client()
    for host in ("127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"):
        assert client.get("/api/people", headers=as_host(page, host)).status_code == 200, host
        origin = "http://" + host.lower()
        login = client.post("/api/login", json={"name": "Ana"}, headers=as_host(page, host, origin))
        assert login.status_code == 200, host
    refused = (
        "127.0.0.1",  # the port is part of the name
        "127.0.0.1:1",
        "localhost.rebind.example:{port}",
        "127.0.0.1.rebind.example:{port}",
        "192.168.1.20:{port}",
        "",
    )
    for host in refused:
        assert client.get("/api/people", headers=as_host(page, host)).status_code == 421, host


def test_origin_is_checked_against_the_same_names_scheme_and_port_included(
    web_page: Callable[..., Any],
) -> None:
    page = web_page()
    ana = page.login("Ana")
    body = {"text": "hola"}
    for origin in (
        "https://127.0.0.1:{port}",  # the scheme counts
        "http://127.0.0.1:1",  # another page on this machine
        "http://localhost",
        "http://rebind.example:{port}",
        "null",  # a sandboxed frame, a file
    ):
        headers = {"Origin": origin.format(port=port_of(page))}
        refused = ana.post("/api/conversations", json=body, headers=headers)
        assert refused.status_code == 403, origin
        assert refused.json() == {"error": guard.ORIGIN_REFUSED}
        assert ana.get("/api/conversations", headers=headers).status_code == 403, origin
    # The page under another of its own names is the same page.
    same = {"Origin": f"http://localhost:{port_of(page)}"}
    assert ana.get("/api/conversations", headers=same).status_code == 200


def test_extra_names_come_from_the_allow_list(web_page: Callable[..., Any]) -> None:
    page = web_page(allowed_hosts=["casa.local", "enlace.example.org:8443"])
    client = page.client()
    accepted = [
        ("casa.local:{port}", "http://casa.local:{port}"),
        ("casa.local", "https://casa.local"),  # behind an HTTPS proxy that keeps Host
        ("enlace.example.org:8443", "https://enlace.example.org:8443"),
    ]
    for host, origin in accepted:
        login = client.post("/api/login", json={"name": "Ana"}, headers=as_host(page, host, origin))
        assert login.status_code == 200, (host, origin)
    wrong_origin = as_host(page, "casa.local:{port}", "http://otra.local:{port}")
    assert client.post("/api/login", json={"name": "Ana"}, headers=wrong_origin).status_code == 403
    for host in ("otra.local:{port}", "enlace.example.org", "enlace.example.org:{port}"):
        assert client.get("/api/people", headers=as_host(page, host)).status_code == 421, host


def test_the_names_of_a_page_listening_on_the_home_network() -> None:
    lan = WebConfig.model_validate({"host": "0.0.0.0", "allowed_hosts": ["casa.local"]})
    # A connection that arrived at 192.168.1.20: that address is the page's own (never a
    # rebound name); loopback names only on a loopback connection.
    assert guard.own_hosts(lan, ("192.168.1.20", 8765)) == {
        "192.168.1.20:8765",
        "casa.local",
        "casa.local:8765",
    }
    assert "localhost:8765" in guard.own_hosts(lan, ("127.0.0.1", 8765))
    one = WebConfig.model_validate({"host": "fe80::1"})
    assert guard.own_hosts(one, ("fe80::1", 80)) == {"[fe80::1]:80", "[fe80::1]"}


def test_the_allow_list_accepts_host_names_only() -> None:
    names = ["casa.local", "192.168.1.20:8765", "[fe80::1]:8765", "Enlace-Casa"]
    assert WebConfig.model_validate({"allowed_hosts": names}).allowed_hosts == names
    for bad in ("http://casa.local", "casa.local/", "*.example", "a b", "casa.local:"):
        with pytest.raises(ValidationError, match="allowed_hosts"):
            WebConfig.model_validate({"allowed_hosts": [bad]})


# ------------------------------------------------------------------- 2. sessions and tokens


def test_a_changed_token_ends_the_sessions_made_with_the_old_one(
    web_page: Callable[..., Any], tmp_path: Path
) -> None:
    page = web_page(people=TOKEN_PEOPLE, env={"TOKEN_ANA": OLD_TOKEN})
    ana, bruno = page.login("Ana", OLD_TOKEN), page.login("Bruno")
    page.stop()

    same = web_page(people=TOKEN_PEOPLE, env={"TOKEN_ANA": OLD_TOKEN})  # a plain restart
    for client in (ana, bruno):
        client.base_url = httpx.URL(same.base)
        assert client.get("/api/me").status_code == 200
    same.stop()

    # Ana's token changes, and Bruno gets one: every cookie made before is refused.
    people = [{"name": "Ana", "token_env": "TOKEN_ANA"}, {"name": "Bruno", "token_env": "TB"}]
    changed = web_page(people=people, env={"TOKEN_ANA": NEW_TOKEN, "TB": "bruno-token-0123456789"})
    for client in (ana, bruno):
        client.base_url = httpx.URL(changed.base)
        refused = client.get("/api/me")
        assert refused.status_code == 401
        assert client.get("/api/conversations").status_code == 401
    assert changed.login("Ana", NEW_TOKEN).get("/api/me").json()["name"] == "Ana"
    # The server's key is private, and neither it nor the history holds a token.
    key = tmp_path / "web.sqlite3.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for path in (key, tmp_path / "web.sqlite3"):
        assert OLD_TOKEN.encode() not in path.read_bytes()
        assert NEW_TOKEN.encode() not in path.read_bytes()


def test_end_sessions_command_signs_a_person_out_at_once(
    web_page: Callable[..., Any], in_process: Callable[..., Any], tmp_path: Path
) -> None:
    from enlace_agent.cli.assistant import main

    page = web_page()
    ana, ana_phone, bruno = page.login("Ana"), page.login("Ana"), page.login("Bruno")
    config = tmp_path / "assistant.yaml"
    config.write_text(f"web:\n  database: {tmp_path / 'web.sqlite3'}\n", encoding="utf-8")

    ended = in_process(main, "end-sessions", "Ana", "--config", str(config))
    assert ended.returncode == 0, ended.stderr
    assert "Sesiones cerradas de Ana: 2" in ended.stderr
    assert ana.get("/api/me").status_code == 401  # the page is still running
    assert ana_phone.get("/api/me").status_code == 401
    assert bruno.get("/api/me").status_code == 200
    again = in_process(main, "end-sessions", "Ana", "--config", str(config))
    assert again.returncode == 0 and "Sesiones cerradas de Ana: 0" in again.stderr
    helped = in_process(main, "end-sessions", "--help")
    assert helped.returncode == 0 and "enlace-assistant end-sessions Ana" in helped.stdout
    missing = in_process(main, "end-sessions", "--config", str(config))
    assert missing.returncode == 2


def test_sign_ins_made_before_fingerprints_end_when_the_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "web.sqlite3"
    with closing(sqlite3.connect(path)) as db:  # a file as version 2 wrote it, with a sign-in
        db.executescript(f"{MIGRATIONS[0]}{MIGRATIONS[1]} PRAGMA user_version = 2;")
        cookie_hash = hashlib.sha256(b"an-old-cookie").hexdigest()
        db.execute(
            "INSERT INTO sessions VALUES (?, 'Ana', 'c', ?)", (cookie_hash, time.time() + 60)
        )
        db.commit()
    store = Store(path)
    assert store.session("an-old-cookie") is None
    token, session = store.create_session("Ana", 60, store.fingerprint(None))
    assert store.session(token) == session
    assert session.fingerprint not in (store.fingerprint(OLD_TOKEN), "")


# ------------------------------------------------------------------- 3. a private history


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def sidecars(database: Path) -> list[Path]:
    return [Path(f"{database}{suffix}") for suffix in ("-wal", "-shm")]


@pytest.mark.usefixtures("umask_022")
def test_the_history_folder_and_files_are_private(tmp_path: Path) -> None:
    store = store_for(WebConfig(), {"XDG_DATA_HOME": str(tmp_path / "data")})
    assert store.path == tmp_path / "data" / "enlace" / "web.sqlite3"
    assert mode(store.path.parent) == 0o700
    assert mode(store.path) == 0o600
    # While a connection is open, SQLite keeps its -wal and -shm files beside the history.
    with closing(sqlite3.connect(store.path)) as reader:
        reader.execute("SELECT count(*) FROM conversations").fetchall()
        store.create_conversation("Ana", "¿Qué tal?")
        for path in sidecars(store.path):
            assert mode(path) == 0o600, path.name
    custom = tmp_path / "elsewhere" / "deep" / "h.sqlite3"
    created = store_for(WebConfig(database=str(custom)), {})
    assert mode(created.path.parent) == 0o700 and mode(created.path) == 0o600


@pytest.mark.usefixtures("umask_022")
def test_a_looser_history_left_by_an_older_enlace_is_tightened_at_start_up(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "enlace"
    folder.mkdir(parents=True)
    path = folder / "web.sqlite3"
    with closing(sqlite3.connect(path)) as older:  # an older Enlace, still running
        older.execute("PRAGMA journal_mode = WAL")
        older.execute("CREATE TABLE leftover (x)")
        older.commit()
        assert [mode(p) for p in (folder, path, *sidecars(path))] == [0o755] + [0o644] * 3
        store_for(WebConfig(), {"XDG_DATA_HOME": str(tmp_path / "data")})
        assert mode(folder) == 0o700
        assert [mode(p) for p in (path, *sidecars(path))] == [0o600] * 3
    # A folder named in web.database is the person's own: its files are made private, the
    # folder is left as it is (it may be their home).
    shared = tmp_path / "shared"
    shared.mkdir()
    store_for(WebConfig(database=str(shared / "h.sqlite3")), {})
    assert mode(shared) == 0o755 and mode(shared / "h.sqlite3") == 0o600


@pytest.mark.usefixtures("umask_022")
def test_an_exported_history_is_private_too(in_process: Callable[..., Any], tmp_path: Path) -> None:
    from enlace_agent.cli.assistant import main

    config = tmp_path / "assistant.yaml"
    config.write_text(f"web:\n  database: {tmp_path / 'web.sqlite3'}\n", encoding="utf-8")
    store_for(WebConfig(database=str(tmp_path / "web.sqlite3")), {}).create_conversation(
        "Ana", "Algo privado"
    )
    fresh, older = tmp_path / "ana.json", tmp_path / "old.json"
    older.write_text("{}", encoding="utf-8")
    for out in (fresh, older):
        done = in_process(main, "export-history", "Ana", "--out", str(out), "--config", str(config))
        assert done.returncode == 0, done.stderr
        assert mode(out) == 0o600, out.name
        assert "Algo privado" in out.read_text(encoding="utf-8")
    nowhere = str(tmp_path / "no-such-folder" / "ana.json")
    refused = in_process(main, "export-history", "Ana", "--out", nowhere, "--config", str(config))
    assert refused.returncode == 2 and "no se puede escribir" in refused.stderr
    assert "Traceback" not in refused.stderr


# ------------------------------------------------------------------- 4. every response


def test_every_response_has_the_security_headers_and_errors_are_spanish_json(
    web_page: Callable[..., Any], tmp_path: Path
) -> None:
    page = web_page()
    ana = page.login("Ana")
    stranger = page.client()
    responses = {
        "page": ana.get("/"),
        "api": ana.get("/api/me"),
        "static": ana.get("/static/app.js"),
        "static missing": ana.get("/static/nada.js"),
        "static escape": ana.get("/static/../app.py"),
        "route missing": ana.get("/api/nada"),
        "method": ana.put("/api/me", json={}),
        "static method": ana.post("/static/app.js", json={}),
        "signed out": stranger.get("/api/me"),
        "other host": stranger.get("/", headers=as_host(page, "rebind.example:{port}")),
    }
    for name, response in responses.items():
        for header, value in guard.SECURITY_HEADERS.items():
            assert response.headers.get(header) == value, (name, header)
    errors = {
        "static missing": (404, guard.NOT_FOUND),
        "static escape": (404, guard.NOT_FOUND),
        "route missing": (404, guard.NOT_FOUND),
        "method": (405, guard.METHOD_REFUSED),
        "static method": (405, guard.METHOD_REFUSED),
        "signed out": (401, "Tienes que entrar de nuevo."),
        "other host": (421, guard.HOST_REFUSED),
    }
    for name, (status, message) in errors.items():
        response = responses[name]
        assert response.status_code == status, name
        assert response.headers["content-type"] == "application/json", name
        assert response.json() == {"error": message}, name
    # A fault of the server itself (the history file broken under it): a 500 in Spanish too.
    (tmp_path / "web.sqlite3").write_bytes(b"not a database" * 512)
    broken = ana.get("/api/conversations")
    assert broken.status_code == 500
    assert broken.json() == {"error": guard.SERVER_FAULT}
    for header, value in guard.SECURITY_HEADERS.items():
        assert broken.headers.get(header) == value, header
