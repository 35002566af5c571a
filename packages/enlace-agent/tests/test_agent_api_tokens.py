"""The keys of the OpenAI-compatible endpoint (issue 38): `enlace-assistant token create | list |
revoke`, shown once, kept only as a hash, a revoked one refused."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from enlace_agent.cli.assistant import main
from enlace_agent.household import Store
from enlace_agent.household.tokens import ApiTokens


def family(tmp_path: Path) -> tuple[str, str, Path]:
    database = tmp_path / "web.sqlite3"
    config = tmp_path / "assistant.yaml"
    config.write_text(
        json.dumps(
            {"web": {"database": str(database), "people": [{"name": "Ana"}, {"name": "Luis"}]}}
        )
    )
    return "--config", str(config), database


def test_token_create_list_revoke(in_process: Callable[..., Any], tmp_path: Path) -> None:
    *c, database = family(tmp_path)
    made = in_process(main, "token", "create", "Ana", "--nombre", "móvil", *c)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("enlace-") and len(token) > 40
    assert "no se vuelve a mostrar" in made.stderr and token not in made.stderr
    kitchen = in_process(
        main, "token", "create", "--casa", "--nombre", "altavoz de la cocina", "--voz", *c
    )
    assert kitchen.returncode == 0, kitchen.stderr
    # only the hash is kept
    with closing(sqlite3.connect(database)) as db:
        rows = db.execute("SELECT token_hash, name, holder, voice FROM api_tokens").fetchall()
    assert token not in json.dumps(rows)
    assert rows[0] == (hashlib.sha256(token.encode()).hexdigest(), "móvil", "Ana", 0)
    assert rows[1][1:] == ("altavoz de la cocina", None, 1)
    tokens = ApiTokens(Store(database))
    people = ("Ana", "Luis")
    checked = tokens.check(token, people)
    assert checked is not None and checked.holder == "Ana" and checked.last_used is not None
    assert tokens.check(token + "x", people) is None
    assert tokens.check(token, ["Luis"]) is None  # Ana no longer in the family
    listed = in_process(main, "token", "list", *c)
    assert "móvil (Ana)" in listed.stdout and "altavoz de la cocina (casa, voz)" in listed.stdout
    assert token not in listed.stdout
    revoked = in_process(main, "token", "revoke", str(checked.id), *c)
    assert revoked.returncode == 0 and "Revocada" in revoked.stderr
    assert tokens.check(token, people) is None
    listed = json.loads(in_process(main, "token", "list", "--json", *c).stdout)
    assert listed["tokens"][0]["revoked"] is not None and listed["tokens"][1]["revoked"] is None


def test_token_refusals_are_one_paragraph_exit_2(
    in_process: Callable[..., Any], tmp_path: Path
) -> None:
    *c, _ = family(tmp_path)
    for argv, said in [
        (("create", "Marta", "--nombre", "móvil"), "no está en web.people"),
        (("create", "--nombre", "móvil"), "di de quién es la clave"),
        (("create", "Ana", "--casa", "--nombre", "móvil"), "di de quién es la clave"),
        (("create", "Ana", "--nombre", "  "), "está vacío"),
        (("revoke", "99"), "no hay ninguna clave n.º 99"),
    ]:
        ran = in_process(main, "token", *argv, *c)
        assert ran.returncode == 2 and said in ran.stderr, (argv, ran.stderr)
        assert "Traceback" not in ran.stderr and ran.stdout == ""


def test_restoring_an_old_snapshot_never_brings_back_a_revoked_key(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent import snapshot as snap

    env = {**clean_env, "XDG_DATA_HOME": str(tmp_path / "data")}
    config = AssistantConfig.model_validate({"web": {"people": [{"name": "Ana"}]}})
    h = snap.household(config, env)
    store = Store(h.database)
    store.create_conversation("Ana", "Hola")  # a person's restore needs some of her rows
    tokens = ApiTokens(store)
    token, made = tokens.create("Ana", "móvil")
    kept = snap.create(h)
    tokens.revoke(made.id)
    for person in (None, "Ana"):
        snap.restore(h, kept.path, person=person)
        assert ApiTokens(Store(h.database)).check(token, ["Ana"]) is None, person
