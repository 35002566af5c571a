"""Where everything of a household lives, decided once from its settings and the environment and
handed to whoever needs a path: memory, snapshots, `doctor`, the model versions, the services
and the page. Nothing else joins a folder and a file name of the household.

    XDG_CONFIG_HOME/enlace/assistant.yaml, search.yaml, .env   the settings and the keys
    XDG_DATA_HOME/enlace/web.sqlite3                            the household's database
    XDG_DATA_HOME/enlace/snapshots/                             its snapshots (beside it)
    XDG_DATA_HOME/enlace/models/                                the model versions
    XDG_CONFIG_HOME/systemd/user/                               the home server's units

`web.database`, `web.snapshots.directory`, `web.home.models_dir` and `search_config` of
`assistant.yaml` move each of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from enlace_config.schema.agent import AssistantConfig, WebConfig

from enlace_agent.settings import cache_dir, data_dir, settings_file

DATABASE = "web.sqlite3"  # the name a household's file has always had: kept, not renamed


@dataclass(frozen=True)
class HouseholdPaths:
    config_file: Path  # assistant.yaml (it may not exist: the defaults)
    env_file: Path  # .env, with the keys
    search_file: Path  # search.yaml
    database: Path
    private_folder: bool  # the database's folder is Enlace's own (made 0700 even when it exists)
    snapshots: Path
    models: Path
    units: Path  # systemd's folder for the user's own units
    data: Path  # what Enlace must not lose
    cache: Path  # what Enlace may lose

    @classmethod
    def of(
        cls,
        config: AssistantConfig,
        env: Mapping[str, str],
        config_file: Path | None = None,
        env_file: Path | None = None,
    ) -> HouseholdPaths:
        """The household `config` (read from `config_file`, when given) describes in `env`."""
        database, private = database_path(config.web, env)
        snap, home = config.web.snapshots, config.web.home
        search = Path(config.search_config) if config.search_config else None
        config_home = env.get("XDG_CONFIG_HOME") or str(
            Path(env.get("HOME", str(Path.home()))) / ".config"
        )
        return cls(
            config_file=settings_file("assistant.yaml", config_file, env),
            env_file=settings_file(".env", env_file, env),
            search_file=settings_file("search.yaml", search, env),
            database=database,
            private_folder=private,
            snapshots=Path(snap.directory) if snap.directory else database.parent / "snapshots",
            models=Path(home.models_dir) if home.models_dir else data_dir(env) / "models",
            units=Path(config_home) / "systemd" / "user",
            data=data_dir(env),
            cache=cache_dir(env),
        )


def database_path(web: WebConfig, env: Mapping[str, str]) -> tuple[Path, bool]:
    """The database file, and whether its folder is Enlace's own (not one the settings name)."""
    if web.database:
        return Path(web.database), False
    return data_dir(env) / DATABASE, True
