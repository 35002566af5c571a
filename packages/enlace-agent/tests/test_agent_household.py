"""The household core: where everything of a household lives (one value, built once), and its
database, which a household's existing file opens (or migrates) without losing a row."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from enlace_config.schema.agent import AssistantConfig

from enlace_agent.household import SCHEMA_VERSION, HouseholdPaths, Store
from enlace_agent.household.schema import MIGRATIONS

TODAYS_SCHEMA = 5  # what Enlace wrote before the shopping list (its own migration, 6)


def test_paths_follow_the_environment_and_the_settings(tmp_path: Path) -> None:
    env = {
        "XDG_CONFIG_HOME": str(tmp_path / "c"),
        "XDG_DATA_HOME": str(tmp_path / "d"),
        "XDG_CACHE_HOME": str(tmp_path / "k"),
    }
    paths = HouseholdPaths.of(AssistantConfig(), env)
    assert paths.config_file == tmp_path / "c/enlace/assistant.yaml"
    assert paths.env_file == tmp_path / "c/enlace/.env"
    assert paths.search_file == tmp_path / "c/enlace/search.yaml"
    assert paths.database == tmp_path / "d/enlace/web.sqlite3" and paths.private_folder
    assert paths.snapshots == tmp_path / "d/enlace/snapshots"
    assert paths.models == tmp_path / "d/enlace/models"
    assert paths.units == tmp_path / "c/systemd/user"
    assert paths.cache == tmp_path / "k/enlace"
    moved = AssistantConfig.model_validate(
        {
            "search_config": str(tmp_path / "s.yaml"),
            "web": {
                "database": str(tmp_path / "h/casa.sqlite3"),
                "snapshots": {"directory": str(tmp_path / "copias")},
                "home": {"models_dir": str(tmp_path / "modelos")},
            },
        }
    )
    there = HouseholdPaths.of(moved, env, tmp_path / "a.yaml", tmp_path / "claves.env")
    assert there.config_file == tmp_path / "a.yaml" and there.env_file == tmp_path / "claves.env"
    assert there.search_file == tmp_path / "s.yaml"
    assert there.database == tmp_path / "h/casa.sqlite3" and not there.private_folder
    assert there.snapshots == tmp_path / "copias" and there.models == tmp_path / "modelos"


def _file_of_todays_code(path: Path) -> None:
    """A household file as the code before the shopping list wrote it: schema 5, a conversation,
    a memory, a sign-in."""
    with closing(sqlite3.connect(path)) as db:
        for version in range(TODAYS_SCHEMA):
            db.executescript(
                f"BEGIN; {MIGRATIONS[version]} PRAGMA user_version = {version + 1}; COMMIT;"
            )
        db.execute(
            "INSERT INTO conversations (id, person, title, created, updated) "
            "VALUES ('c1', 'Ana', 'Hola', 1, 1)"
        )
        db.execute(
            "INSERT INTO messages (conversation_id, role, content, created) "
            "VALUES ('c1', 'user', 'Hola', 1)"
        )
        db.execute(
            "INSERT INTO memories (person, text, author, source, created, updated) "
            "VALUES ('Ana', 'La abuela vive en Soria', 'Ana', 'page', 1, 1)"
        )
        db.commit()


def test_a_file_of_todays_code_migrates_keeping_every_row(tmp_path: Path) -> None:
    path = tmp_path / "web.sqlite3"
    _file_of_todays_code(path)
    seen: list[int] = []
    store = Store(path, lambda _path, found: seen.append(found))
    assert seen == [TODAYS_SCHEMA]  # the snapshot hook ran before the migration
    with store.transaction() as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT COUNT(*) FROM shopping_list").fetchone()[0] == 0
    found = store.conversation("Ana", "c1")
    assert found is not None and [m["content"] for m in found["messages"]] == ["Hola"]
    with store.transaction() as db:
        assert db.execute("SELECT text FROM memories").fetchone()[0] == "La abuela vive en Soria"
    Store(path, lambda _path, found: seen.append(found))  # up to date: no hook, nothing changes
    assert seen == [TODAYS_SCHEMA]
