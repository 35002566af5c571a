"""The model versions of the home server (`enlace-assistant model install | list | use | rollback`).

    MODELS/<name>/model.gguf     the file, copied (never moved) from where the export left it
    MODELS/<name>/version.json   its sha256, size, when it was installed and its `general.*`
                                 metadata (name, architecture, licence…), read from the header
    MODELS/current.gguf          a symlink to the version the model service serves
    MODELS/history.json          the versions used, oldest first (`rollback` goes one back)

A file is refused when it is not a GGUF (magic), is cut short (its tensors reach past its end) or,
at `use`, no longer has the sha256 it was installed with; the current version is then left as it
was. Switching is a symlink swap (a new link renamed over the old one, atomic), one at a time under
a file lock, so two `use` at once leave one whole choice. Only the standard library reads GGUF
headers here (the agent stays without torch and numpy).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from enlace_config.schema.agent import AssistantConfig

from enlace_agent.files import atomic_write, fsync_dir, locked, sha256_file
from enlace_agent.shared import one_line

MAGIC = b"GGUF"
CURRENT = "current.gguf"
HISTORY = "history.json"
VERSION_FILE = "version.json"
MODEL_FILE = "model.gguf"
LOCK = ".models.lock"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
# GGML tensor types: (elements per block, bytes per block), for the end-of-file check.
BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
}  # fmt: skip
# Arrays of arrays nested deeper than this are refused (llama.cpp reads none nested at all; the
# gguf writer nests one or two): a file nesting 50,000 would exhaust Python's recursion.
MAX_NESTING = 8
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}  # fmt: skip


class ModelRefused(Exception):
    """A model file or a request that cannot be met; the message (Spanish) says why and what to
    do. Nothing changed."""


@dataclass(frozen=True)
class Version:
    name: str
    path: Path
    sha256: str
    size: int
    installed: str
    metadata: Mapping[str, Any]
    current: bool


# ---------------------------------------------------------------- reading a GGUF header
def read_gguf(path: Path) -> dict[str, Any]:
    """The `general.*` metadata of a GGUF file; `ModelRefused` when it is not one or is cut."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            if f.read(4) != MAGIC:
                raise ModelRefused(f"{path.name} no es un modelo GGUF (no empieza por «GGUF»).")
            version, tensors, kvs = struct.unpack("<IQQ", _exact(f, 20))
            if version < 2:
                raise ModelRefused(
                    f"{path.name} es un GGUF de la versión {version}, demasiado vieja."
                )
            found: dict[str, Any] = {}
            alignment = 32
            for _ in range(kvs):
                key = _string(f, size)
                try:
                    value = _value(f, struct.unpack("<I", _exact(f, 4))[0], size)
                except _TooDeep:
                    raise ModelRefused(
                        f"{path.name} está dañado o no es un modelo: su metadato "
                        f"«{one_line(key)[:80]}» anida listas dentro de listas más de "
                        f"{MAX_NESTING} niveles (un modelo de verdad no pasa de dos). Vuelve a "
                        "exportarlo o a descargarlo."
                    ) from None
                if key.startswith("general."):
                    found[key] = value
                if key == "general.alignment" and isinstance(value, int) and value > 0:
                    alignment = value
            end = 0
            for _ in range(tensors):
                _string(f, size)
                (dims,) = struct.unpack("<I", _exact(f, 4))
                shape = struct.unpack(f"<{dims}Q", _exact(f, 8 * dims))
                kind, offset = struct.unpack("<IQ", _exact(f, 12))
                count = 1
                for d in shape:
                    count *= d
                per, nbytes = BLOCKS.get(kind, (0, 0))
                end = max(end, offset + (count // per * nbytes if per else 0))
            data_start = -(-f.tell() // alignment) * alignment
    except (struct.error, EOFError, UnicodeDecodeError, MemoryError):
        raise ModelRefused(
            f"{path.name} está cortado o dañado (su cabecera GGUF no se puede leer entera): "
            "vuelve a copiarlo o a exportarlo."
        ) from None
    if tensors and data_start + end > size:
        raise ModelRefused(
            f"{path.name} está cortado: le faltan {data_start + end - size} bytes de pesos. "
            "Vuelve a copiarlo o a exportarlo."
        )
    return found


def _exact(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError
    return data


def _string(f: IO[bytes], size: int) -> str:
    (n,) = struct.unpack("<Q", _exact(f, 8))
    if n > size:
        raise EOFError
    return _exact(f, n).decode()


class _TooDeep(Exception):
    """A metadata value nests arrays more than MAX_NESTING levels."""


def _value(f: IO[bytes], kind: int, size: int, depth: int = 0) -> Any:
    if kind in SCALARS:
        fmt = SCALARS[kind]
        return struct.unpack(fmt, _exact(f, struct.calcsize(fmt)))[0]
    if kind == 8:
        return _string(f, size)
    if kind == 9:
        item, count = struct.unpack("<IQ", _exact(f, 12))
        if count > size:
            raise EOFError
        if item == 9 and depth >= MAX_NESTING:
            raise _TooDeep
        values = [_value(f, item, size, depth + 1) for _ in range(count)]
        return values if count <= 64 else f"({count} valores)"
    raise EOFError  # an unknown type: cannot be skipped safely


# ---------------------------------------------------------------- the versions folder
@contextlib.contextmanager
def _locked(folder: Path) -> Generator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / LOCK):
        yield


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=2))


def current_name(folder: Path) -> str | None:
    link = folder / CURRENT
    return Path(os.readlink(link)).parent.name if link.is_symlink() else None


def lost_version(folder: Path) -> str | None:
    """The current version's name when its file is gone or no longer has the size it was
    installed with (the model service would not start on it again); None when it is whole or
    there is no current version."""
    name = current_name(folder)
    if name is None:
        return None
    try:
        size = (folder / CURRENT).stat().st_size
    except OSError:
        return name
    recorded = next((v.size for v in versions(folder) if v.name == name), size)
    return name if size != recorded else None


def versions(folder: Path) -> list[Version]:
    """The installed versions, oldest first."""
    now = current_name(folder)
    found: list[Version] = []
    for side in sorted(folder.glob(f"*/{VERSION_FILE}")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            d = json.loads(side.read_text("utf-8"))
            found.append(
                Version(
                    d["name"],
                    side.parent / MODEL_FILE,
                    d["sha256"],
                    int(d["size"]),
                    d["installed"],
                    d.get("metadata", {}),
                    d["name"] == now,
                )
            )
    return sorted(found, key=lambda v: v.installed)


def install(folder: Path, source: Path, name: str | None = None) -> Version:
    """Copies `source` in as a new version (checked first: a GGUF, whole); not made current. The
    same file installed again (same sha256) is the version it already is: nothing is copied."""
    if not source.is_file():
        raise ModelRefused(f"no existe el fichero {source}.")
    metadata = read_gguf(source)
    digest = sha256_file(source)
    same = [v for v in versions(folder) if v.sha256 == digest and (name is None or v.name == name)]
    if same:
        return same[0]
    name = name or _default_name(source, metadata)
    if not NAME.match(name):
        raise ModelRefused(
            f"«{name}» no vale como nombre de versión (letras, números, «.», «_» y «-»): usa --name."
        )
    with _locked(folder):
        target = folder / name
        if target.exists():
            raise ModelRefused(
                f"ya hay una versión «{name}»: elige otro nombre con --name (o «enlace-assistant "
                "model list» para ver las instaladas)."
            )
        work = Path(tempfile.mkdtemp(prefix=f".install-{name}.", dir=folder))
        try:
            shutil.copyfile(source, work / MODEL_FILE)
            copied = work / MODEL_FILE
            read_gguf(copied)  # the copy is whole too
            record = {
                "name": name,
                "sha256": sha256_file(copied),
                "size": copied.stat().st_size,
                "installed": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "source": str(source.resolve()),
                "metadata": metadata,
            }
            _write_json(work / VERSION_FILE, record)
            os.rename(work, target)  # the version appears whole or not at all
            fsync_dir(folder)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return next(v for v in versions(folder) if v.name == name)


def _default_name(source: Path, metadata: Mapping[str, Any]) -> str:
    base = str(metadata.get("general.name") or source.stem)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{base}-{stamp}").strip("-.")[:80]


def use(folder: Path, name: str) -> Version:
    """Makes `name` the current version (checked against its sha256 first)."""
    with _locked(folder):
        found = {v.name: v for v in versions(folder)}
        if name not in found:
            listed = ", ".join(found) or "ninguna"
            raise ModelRefused(f"no hay ninguna versión «{name}» (instaladas: {listed}).")
        version = found[name]
        read_gguf(version.path)
        if sha256_file(version.path) != version.sha256:
            raise ModelRefused(
                f"el fichero de la versión «{name}» ha cambiado desde que se instaló (su sha256 "
                "no coincide): no se usa. Vuelve a instalarlo con «enlace-assistant model install»."
            )
        link = folder / CURRENT
        tmp = folder / f".{CURRENT}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(Path(name) / MODEL_FILE, tmp)
        os.replace(tmp, link)  # atomic: the service sees the old file or the new one
        fsync_dir(folder)
        history = _history(folder)
        _write_json(folder / HISTORY, [*[h for h in history if h != name], name])
    return next(v for v in versions(folder) if v.name == name)


def _history(folder: Path) -> list[str]:
    try:
        data = json.loads((folder / HISTORY).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    items: list[Any] = data if isinstance(data, list) else []  # pyright: ignore[reportUnknownVariableType]
    return [str(n) for n in items]


def previous(folder: Path) -> str:
    """The version used before the current one (`rollback`)."""
    now = current_name(folder)
    installed = {v.name for v in versions(folder)}
    earlier = [n for n in _history(folder) if n != now and n in installed]
    if not earlier:
        raise ModelRefused("no hay una versión anterior a la que volver.")
    return earlier[-1]


def rollback(folder: Path) -> Version:
    """Back to the previous version; the one left is moved to the start of the history, so a
    second rollback goes further back rather than returning."""
    target = previous(folder)
    left = current_name(folder)
    version = use(folder, target)
    if left is not None:
        with _locked(folder):
            rest = [n for n in _history(folder) if n != left]
            _write_json(folder / HISTORY, [left, *rest])
    return version


def serving_label(config: AssistantConfig, models: Path) -> str:
    """The model an answer names: the configured one, with the installed version the model
    service serves from `models` when there is one (`enlace-chat (v2)`)."""
    version = current_name(models)
    return f"{config.model} ({version})" if version else config.model


def recently_switched(config: AssistantConfig, models: Path) -> bool:
    """True while a `model use` is recent enough for the model server to be still restarting
    (the link's own time, within `web.home.model_ready_timeout_s`)."""
    try:
        changed = (models / CURRENT).lstat().st_mtime
    except OSError:
        return False
    return dt.datetime.now().timestamp() - changed < config.web.home.model_ready_timeout_s
