"""The home server's systemd units (`enlace-assistant service install | remove | status`).

Two *user* services of the person who installs Enlace (the choice, README «Servidor doméstico»):
they run under that account, so `enlace-assistant` in their terminal uses the very files the page
uses, nothing needs root beyond `loginctl enable-linger` (start on boot without a sign-in), and the
sandbox (`SANDBOX`, in its own user namespace) makes the rest of the system read-only
(`ProtectSystem=strict` with only Enlace's data and cache folders writable,
`ProtectHome=read-only`), hides /tmp, devices, other processes and the kernel's knobs, and
filters system calls and socket families.

- `enlace-model.service`: llama-server on the current model version (`MODELS/current.gguf`).
- `enlace-web.service`: the family page, started after the model service and only once the model
  server answers (`ExecStartPre`: `enlace-assistant service wait`, bounded by
  `web.home.model_ready_timeout_s`); both restart after a crash.

Units are written whole: every one to a temporary file first, then each renamed into place, so an
interrupted install leaves the units as they were or the new ones, never a half-written file.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from enlace_config.schema.agent import AssistantConfig

from enlace_agent.files import atomic_write_all, private_folder
from enlace_agent.household.paths import HouseholdPaths
from enlace_agent.model_versions import CURRENT

MODEL_UNIT = "enlace-model.service"
WEB_UNIT = "enlace-web.service"
UNITS = (MODEL_UNIT, WEB_UNIT)
UNIT_MODE = 0o644  # systemd and the family read the units; nothing secret is in them
# The sandbox of both units (README «Servidor doméstico», the `systemd-analyze security` figures).
# PrivateUsers=yes first: systemd before 253 silently ignores a user unit's namespace options
# without it (ProtectSystem, ProtectHome and PrivateTmp did nothing on Debian 12) and refuses to
# start one that drops capabilities (ProtectKernelModules: 218/CAPABILITIES); 253 and later
# imply it. Inside its own user namespace the service may drop its capability bounding set.
SANDBOX = """PrivateUsers=yes
NoNewPrivileges=yes
CapabilityBoundingSet=
KeyringMode=private
UMask=0077
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
PrivateDevices=yes
PrivateMounts=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM
Restart=on-failure
RestartSec=5
"""
# Sockets each service needs: llama-server listens on TCP; the page also searches the internet
# (netlink: glibc's getaddrinfo sorts several addresses by the machine's own).
MODEL_FAMILIES = "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n"
WEB_FAMILIES = "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n"


class ServiceError(Exception):
    """The services cannot be installed as configured; the message (Spanish) says the fix."""


@dataclass(frozen=True)
class Plan:
    """What `install` writes: unit name -> text, and the folder they go to."""

    folder: Path
    units: Mapping[str, str]
    writable: tuple[Path, ...] = ()  # made (0700) before the units start: systemd needs them


def quote(arg: str) -> str:
    """One argument of an Exec line, quoted for systemd (and `%`, `$` escaped)."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if arg and not any(c in arg for c in " \t\"'\\;"):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: Sequence[str]) -> str:
    return " ".join(quote(a) for a in argv)


def llama_server(config: AssistantConfig, paths: HouseholdPaths) -> Path:
    """The llama-server binary: the configured one, or the newest the build script made."""
    if config.web.home.llama_server:
        return Path(config.web.home.llama_server)
    built = sorted(paths.cache.glob("llama.cpp-*/build/bin/llama-server"))
    if not built:
        raise ServiceError(
            "no encuentro llama-server: compílalo con «scripts/build-llama-server.sh» (una vez "
            "por versión) o indica su ruta en web.home.llama_server de assistant.yaml."
        )
    return built[-1]


def model_argv(config: AssistantConfig, paths: HouseholdPaths) -> list[str]:
    """llama-server's command line: the current model version, where base_url points."""
    url = urlsplit(config.base_url)
    home = config.web.home
    argv = [str(llama_server(config, paths)), "--model", str(paths.models / CURRENT)]
    argv += ["--alias", config.model, "--jinja"]
    argv += ["--host", url.hostname or "127.0.0.1", "--port", str(url.port or 80)]
    argv += ["--ctx-size", str(home.context_size), "--parallel", str(home.parallel)]
    if home.threads is not None:
        argv += ["--threads", str(home.threads)]
    return argv


def page_argv(config_file: Path, *command: str) -> list[str]:
    """`enlace-assistant COMMAND --config FILE` with this Python (the venv it is installed in)."""
    return [
        sys.executable,
        "-m",
        "enlace_agent.cli.assistant",
        *command,
        "--config",
        str(config_file),
    ]


def plan(config: AssistantConfig, paths: HouseholdPaths, env: Mapping[str, str]) -> Plan:
    """The units for the household `paths` says; `env`'s XDG folders are passed on to the page."""
    config_file = paths.config_file.resolve()
    writable = [paths.data, paths.cache]
    if config.web.database:
        writable.append(paths.database.parent)
    if config.web.snapshots.directory:
        writable.append(paths.snapshots)
    xdg = {
        k: v for k, v in env.items() if k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
    }
    environment = "".join(f"Environment={quote(f'{k}={v}')}\n" for k, v in sorted(xdg.items()))
    wait_s = config.web.home.model_ready_timeout_s
    model = f"""[Unit]
Description=Enlace: el servidor del modelo (llama-server)
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={exec_line(model_argv(config, paths))}
{MODEL_FAMILIES}{SANDBOX}
[Install]
WantedBy=default.target
"""
    web = f"""[Unit]
Description=Enlace: la página de la familia
Wants={MODEL_UNIT}
After={MODEL_UNIT}
StartLimitIntervalSec=0

[Service]
Type=simple
{environment}ExecStartPre={exec_line(page_argv(config_file, "service", "wait"))}
ExecStart={exec_line(page_argv(config_file, "serve"))}
TimeoutStartSec={int(wait_s) + 30}
ReadWritePaths={" ".join(quote(f"-{p}") for p in writable)}
{WEB_FAMILIES}{SANDBOX}
[Install]
WantedBy=default.target
"""
    return Plan(paths.units, {MODEL_UNIT: model, WEB_UNIT: web}, tuple(writable))


def write_units(p: Plan) -> list[str]:
    """Writes the units (each whole: temporary file, then rename) after making the folders they
    may write to (a missing one would keep the sandbox from starting); returns those that
    changed."""
    for folder in p.writable:
        private_folder(folder)
    p.folder.mkdir(parents=True, exist_ok=True)
    changed = [n for n, text in p.units.items() if _read(p.folder / n) != text]
    atomic_write_all({p.folder / name: p.units[name] for name in changed}, mode=UNIT_MODE)
    return changed


def remove_units(folder: Path) -> list[str]:
    removed: list[str] = []
    for name in UNITS:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
            removed.append(name)
    return removed


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def wait_for_model(base_url: str, timeout_s: float, poll_s: float = 1.0) -> bool:
    """True once the model server's /health (llama-server) or /models answers 200."""
    import httpx

    base = base_url.rstrip("/")
    urls = (base.removesuffix("/v1") + "/health", base + "/models")
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=min(poll_s * 5, 10.0), trust_env=False) as http:
        while True:
            for url in urls:
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(url).status_code == 200:
                        return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
