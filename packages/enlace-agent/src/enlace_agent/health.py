"""The home server's health, in one place for `GET /api/health` and `enlace-assistant doctor`.

Each check is one line in Spanish that says what is wrong and how to fix it. A check's `status`
is `ok`, `warn` (worth knowing, nobody needs to act: no snapshot yet on a new server) or `fail`
(a person needs to act: `doctor` exits 1). Nothing here ever carries a secret (a key, a token,
a URL's user:password) or a family's conversation text: only names, versions, sizes and ages.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from enlace_config.schema.agent import AssistantConfig

from enlace_agent.household.paths import HouseholdPaths
from enlace_agent.household.schema import SCHEMA_VERSION
from enlace_agent.model_versions import lost_version
from enlace_agent.search.chain import SearchChain
from enlace_agent.shared import as_array, as_object, loads_object

Status = Literal["ok", "warn", "fail"]
MIB = 1 << 20


@dataclass(frozen=True)
class Check:
    name: str  # stable, English: model, search, database, disk, snapshot
    status: Status
    message: str  # Spanish, one line; the fix when the status is not ok
    facts: Mapping[str, Any]  # safe facts for machines (model served, schema version, MiB, hours)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"facts": dict(self.facts)}


def needs_person(checks: Sequence[Check]) -> bool:
    return any(c.status == "fail" for c in checks)


def public_url(url: str) -> str:
    """`url` without a user:password part (never shown)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# ---------------------------------------------------------------- the model server
def check_model(config: AssistantConfig, api_key: str | None, models: Path | None = None) -> Check:
    """The model server answers /models and serves `config.model`; llama-server's /health (at
    the server's root) tells a model still loading from one that is ready. With `models` (the
    installed versions' folder), the version in use must still have its whole file: a server
    that still answers holds it in memory, but would not start again."""
    if models is not None and (lost := lost_version(models)) is not None:
        return Check(
            "model",
            "fail",
            f"La versión del modelo en uso ({lost}) ha perdido su fichero en {models} (borrado o "
            "cambiado): si el servidor del modelo aún responde es porque lo tiene cargado, pero no "
            "volverá a arrancar. Elige otra versión («enlace-assistant model list» y «model use "
            "NOMBRE», o «model rollback») o vuelve a instalar el fichero con «enlace-assistant "
            "model install FICHERO --use».",
            {"lost_version": lost},
        )
    timeout = config.web.home.probe_timeout_s
    base = config.base_url.rstrip("/")
    where = public_url(base)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as http:
            response = http.get(base + "/models", headers=headers)
            root = base.removesuffix("/v1")
            loading = False
            if response.status_code != 200 or root != base:
                with contextlib.suppress(httpx.HTTPError):
                    loading = http.get(root + "/health").status_code == 503
    except httpx.HTTPError:
        return Check(
            "model",
            "fail",
            f"El servidor del modelo no responde en {where}: arráncalo "
            "(«systemctl --user start enlace-model», o «enlace-assistant service status» para ver "
            "por qué se paró) o corrige base_url en assistant.yaml.",
            {"reachable": False},
        )
    if loading:
        return Check(
            "model",
            "warn",
            f"El servidor del modelo en {where} está cargando el modelo: espera un minuto.",
            {"reachable": True, "loading": True},
        )
    if response.status_code in (401, 403):
        return Check(
            "model",
            "fail",
            f"El servidor del modelo en {where} rechaza la clave: define {config.api_key_env} "
            "con la clave correcta.",
            {"reachable": True},
        )
    data = loads_object(response.content) if response.status_code == 200 else None
    entries = [as_object(e) or {} for e in as_array((data or {}).get("data")) or []]
    served = [str(e["id"]) for e in entries if "id" in e]
    if data is None:
        return Check(
            "model",
            "fail",
            f"El servidor en {where} no responde como un servidor compatible con OpenAI "
            f"(HTTP {response.status_code} en /models): revisa base_url en assistant.yaml.",
            {"reachable": True},
        )
    facts = {"reachable": True, "served": served, "model": config.model}
    # llama-server answers any model name with the one it loaded; others need the exact name.
    if served and config.model not in served and len(served) > 1:
        return Check(
            "model",
            "fail",
            f"El servidor del modelo no sirve «{config.model}» (sirve: {', '.join(served)}): "
            "corrige model en assistant.yaml.",
            facts,
        )
    return Check(
        "model",
        "ok",
        f"El servidor del modelo responde en {where} y sirve {', '.join(served) or config.model}.",
        facts,
    )


# ---------------------------------------------------------------- the search chain
def check_search(chain: SearchChain | None, problem: str | None = None) -> Check:
    """The configured chain (or why it cannot be built: `problem`, with its fix) and which of
    its providers are resting after a refusal (the chain's state file)."""
    if problem is not None:
        return Check("search", "fail", f"La búsqueda no puede funcionar: {problem}", {})
    if chain is None:
        return Check(
            "search", "ok", "La búsqueda está desactivada (max_tool_rounds: 0).", {"on": False}
        )
    names = [p.name for p in chain.providers]
    now = dt.datetime.now(dt.UTC).timestamp()
    resting = {n: c for n in names if (c := chain.state.active(n, now)) is not None}
    last = chain.state.last()
    facts = {
        "on": True,
        "providers": names,
        "resting": sorted(resting),
        "last_provider": last[0] if last else None,
    }
    message = f"La búsqueda está configurada: {' → '.join(names)}"
    if last is None:
        message += " (todavía no ha respondido a ninguna búsqueda)."
    else:
        message += f"; la última respuesta fue de {last[0]}."
    if resting:
        waits = ", ".join(
            f"{n} hasta las {dt.datetime.fromtimestamp(c.until).strftime('%H:%M')}"
            for n, c in resting.items()
        )
        status: Status = "fail" if len(resting) == len(names) else "ok"
        message += f" En pausa tras un rechazo: {waits}"
        message += (
            " (ningún proveedor puede buscar: espera a esa hora o añade otro a providers en "
            "search.yaml)."
            if status == "fail"
            else "; responden los demás."
        )
        return Check("search", status, message, facts)
    return Check("search", "ok", message, facts)


# ---------------------------------------------------------------- the history file
def check_database(path: Path, timeout_s: float) -> Check:
    """Writable (a write lock taken and released, nothing written) and its schema version."""
    if not path.exists():
        folder = next((p for p in path.parents if p.exists()), path.anchor)
        if os.access(folder, os.W_OK):
            return Check(
                "database",
                "ok",
                f"Aún no hay historial ({path}): se crea al abrir la página por primera vez.",
                {"exists": False},
            )
        return Check(
            "database",
            "fail",
            f"No se puede crear el historial {path}: la carpeta {folder} no admite escritura "
            "(revisa sus permisos o web.database en assistant.yaml).",
            {"exists": False},
        )
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=timeout_s)) as db:  # closed
            version: int = db.execute("PRAGMA user_version").fetchone()[0]
            db.execute("BEGIN IMMEDIATE")
            db.rollback()
            # A damaged page deep in the file passes the two above; reading it would fail later.
            if db.execute("PRAGMA quick_check").fetchall() != [("ok",)]:
                raise sqlite3.DatabaseError("quick_check found damage")
    except sqlite3.OperationalError as exc:
        busy = exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        why = (
            f"otro programa lo tiene bloqueado más de {timeout_s:g} s"
            if busy
            else "no admite escritura (revisa el propietario y los permisos del fichero y su "
            "carpeta, y el espacio libre)"
        )
        return Check("database", "fail", f"El historial {path} {why}.", {"exists": True})
    except sqlite3.DatabaseError:
        return Check(
            "database",
            "fail",
            f"El historial {path} está dañado: recupéralo de una copia («enlace-assistant "
            "snapshot restore»).",
            {"exists": True},
        )
    facts = {"exists": True, "schema_version": version, "known_version": SCHEMA_VERSION}
    if version > SCHEMA_VERSION:
        return Check(
            "database",
            "fail",
            f"El historial {path} es de un Enlace más nuevo (esquema {version}; este conoce "
            f"el {SCHEMA_VERSION}): actualiza enlace-agent.",
            facts,
        )
    return Check("database", "ok", f"El historial se puede escribir (esquema {version}).", facts)


# ---------------------------------------------------------------- the disk
def check_disk(folder: Path, min_free_mb: int) -> Check:
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path(folder.anchor))
    free_mb = shutil.disk_usage(existing).free // MIB
    facts = {"free_mb": free_mb, "min_free_mb": min_free_mb}
    if free_mb < min_free_mb:
        return Check(
            "disk",
            "fail",
            f"Queda poco disco para los datos ({_size(free_mb)} libres en {existing}, el mínimo "
            f"es {_size(min_free_mb)}): borra copias antiguas o versiones de modelo que no uses "
            "(o baja web.home.min_free_disk_mb).",
            facts,
        )
    return Check("disk", "ok", f"Hay {_size(free_mb)} libres para los datos.", facts)


def _size(mb: int) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb} MiB"


# ---------------------------------------------------------------- snapshots
def check_snapshot(
    newest_verified: dt.datetime | None, max_age_h: float, now: dt.datetime | None = None
) -> Check:
    if newest_verified is None:
        return Check(
            "snapshot",
            "warn",
            "Aún no hay ninguna copia de seguridad comprobada: la página hace una cada día "
            "(o ahora: enlace-assistant snapshot create).",
            {"age_h": None},
        )
    age_h = ((now or dt.datetime.now(dt.UTC)) - newest_verified).total_seconds() / 3600
    facts = {"age_h": round(age_h, 1), "max_age_h": max_age_h}
    if age_h > max_age_h:
        return Check(
            "snapshot",
            "fail",
            f"La última copia de seguridad comprobada tiene {age_h:.0f} h (más de "
            f"{max_age_h:g}): ¿está la página en marcha? Haz una con «enlace-assistant snapshot "
            "create».",
            facts,
        )
    return Check(
        "snapshot", "ok", f"La última copia de seguridad comprobada tiene {age_h:.0f} h.", facts
    )


def newest_verified_snapshot(folder: Path) -> Any:
    """When the newest verified snapshot in `folder` was made (None: none yet)."""
    from enlace_agent.snapshot import snapshots

    for snap in snapshots(folder):
        if snap.verified is not None:
            return snap.created
    return None


# ---------------------------------------------------------------- all of them
def run_checks(
    config: AssistantConfig,
    env: Mapping[str, str],
    paths: HouseholdPaths,
    chain: Callable[[], SearchChain | None],
) -> list[Check]:
    """Every check of the household at `paths`, in the order `doctor` prints them. `chain` gives
    the search chain (None: search off) or raises `SearchUnavailable` with the Spanish reason and
    its fix."""
    home, database = config.web.home, paths.database
    try:
        search = check_search(chain())
    except SearchUnavailable as exc:
        search = check_search(None, str(exc))
    return [
        check_model(config, env.get(config.api_key_env, "").strip() or None, paths.models),
        search,
        check_database(database, config.web.database_timeout_s),
        check_disk(database.parent, home.min_free_disk_mb),
        check_snapshot(newest_verified_snapshot(paths.snapshots), home.max_snapshot_age_h),
    ]


class SearchUnavailable(Exception):
    """The search chain cannot be built; the message (Spanish) says why and how to fix it."""


def assistant_chain(assistant: Any) -> SearchChain | None:
    """The search chain the running assistant's tools share (None: it offers no search)."""
    return assistant.services.chain
