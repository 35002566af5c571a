"""A throwaway OpenSSH server on 127.0.0.1 for the tests of scripts/remote.sh.

Imported by tests/test_remote_*.py (not a conftest: nothing here is loaded for other tests).
The "remote" is this machine seen through sshd: its own host key, an authorized user key, a
known_hosts file holding only that host key, and a login environment (sshd's SetEnv) with a
throwaway HOME, a private tmux socket directory and PATH without uv. The server's pip installs from
a local wheelhouse (PIP_NO_INDEX) holding a wheel of this machine's own uv binary, and the server's
uv works offline from this machine's uv cache, so nothing touches the internet.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REMOTE_SH = REPO / "scripts" / "remote.sh"
SSHD = Path("/usr/sbin/sshd")
# The PATH a fresh login gets on Debian: no uv there, as on a new GPU server.
REMOTE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def remote_path() -> str:
    """REMOTE_PATH without any directory that holds a uv (setup must be tested without one)."""
    return ":".join(d for d in REMOTE_PATH.split(":") if not os.access(f"{d}/uv", os.X_OK))


class SshdUnavailable(RuntimeError):
    """sshd is missing or cannot start here; tests skip with this message."""


def uv_binary() -> Path:
    """The real uv executable (uv run exports UV; a pyenv shim on PATH is not the binary)."""
    candidate = os.environ.get("UV") or shutil.which("uv")
    if candidate is None:
        raise RuntimeError("uv is not on PATH")
    path = Path(candidate).resolve()
    with path.open("rb") as f:
        if f.read(4) != b"\x7fELF":  # a shim script: ask uv itself where it lives
            out = subprocess.run(
                [
                    str(path),
                    "run",
                    "--no-project",
                    "--offline",
                    "python",
                    "-c",
                    "import os; print(os.environ['UV'])",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            path = Path(out).resolve()
    return path


def build_uv_wheel(wheelhouse: Path) -> Path:
    """A real installable wheel carrying this machine's uv binary, for the server's pip."""
    uv = uv_binary()
    version = subprocess.run(
        [str(uv), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wheel = wheelhouse / f"uv-{version}-py3-none-any.whl"
    if wheel.exists():
        return wheel
    dist_info = f"uv-{version}.dist-info"
    files: dict[str, tuple[bytes, int]] = {
        f"uv-{version}.data/scripts/uv": (uv.read_bytes(), 0o755),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode(),
            0o644,
        ),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: enlace-tests\nRoot-Is-Purelib: false\n"
            b"Tag: py3-none-any\n",
            0o644,
        ),
    }
    record = []
    for name, (data, _) in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = (("\n".join(record) + "\n").encode(), 0o644)
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
    tmp.rename(wheel)
    return wheel


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "enlace-test", "-f", str(path)],
        check=True,
    )


@dataclass
class SshServer:
    root: Path
    port: int
    user: str
    user_key: Path
    host_key: Path
    known_hosts: Path
    home: Path
    tmux_tmpdir: Path
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def write_env(self, path: Path, remote_dir: Path | str, **overrides: str | None) -> Path:
        """An env file for remote.sh pointing at this server; None drops a setting."""
        settings: dict[str, str | None] = {
            "ENLACE_REMOTE_HOST": "127.0.0.1",
            "ENLACE_REMOTE_USER": self.user,
            "ENLACE_REMOTE_PORT": str(self.port),
            "ENLACE_REMOTE_KEY": str(self.user_key),
            "ENLACE_REMOTE_KNOWN_HOSTS": str(self.known_hosts),
            "ENLACE_REMOTE_DIR": str(remote_dir),
            "ENLACE_REMOTE_CONNECT_TIMEOUT": "5",
        }
        settings.update(overrides)
        lines = ["# written by tests/remote_fixtures.py"]
        for key, value in settings.items():
            if value is not None:
                lines.append(
                    f'{key}="{value}"' if "'" in value or " " in value else f"{key}={value}"
                )
        path.write_text("\n".join(lines) + "\n")
        return path

    def ssh(self, command: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Run a command on the server as the test user (same login environment as remote.sh)."""
        return subprocess.run(
            [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-i",
                str(self.user_key),
                "-o",
                "IdentitiesOnly=yes",
                "-p",
                str(self.port),
                f"{self.user}@127.0.0.1",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            **kwargs,  # type: ignore[arg-type]
        )

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """tmux against the server's private tmux socket directory."""
        env = {**os.environ, "TMUX_TMPDIR": str(self.tmux_tmpdir)}
        env.pop("TMUX", None)
        return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env)

    def stop(self) -> None:
        self.tmux("kill-server")
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_sshd(root: Path, *, wheelhouse: Path | None = None) -> SshServer:
    """Start sshd on a free port of 127.0.0.1; raise SshdUnavailable if it truly cannot run."""
    if not SSHD.exists():
        raise SshdUnavailable(
            f"{SSHD} is not installed (run scripts/install-system-deps.sh: openssh-server)"
        )
    for tool in ("ssh", "ssh-keygen", "rsync", "tmux"):
        if shutil.which(tool) is None:
            raise SshdUnavailable(f"{tool} is not installed (run scripts/install-system-deps.sh)")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory

    root.mkdir(parents=True, exist_ok=True)
    host_key, user_key = root / "host_key", root / "user_key"
    _keygen(host_key)
    _keygen(user_key)
    authorized = root / "authorized_keys"
    shutil.copy(user_key.with_suffix(".pub"), authorized)
    home = root / "home"
    tmux_tmpdir = root / "tmux"
    home.mkdir()
    tmux_tmpdir.mkdir(mode=0o700)
    user = getpass.getuser()
    uv_cache = subprocess.run(
        [str(uv_binary()), "cache", "dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {
        "HOME": str(home),
        "PATH": remote_path(),
        "TMUX_TMPDIR": str(tmux_tmpdir),
        "UV_CACHE_DIR": uv_cache,  # warm: `uv sync --locked` there needs no network
        "UV_OFFLINE": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        # The interpreter behind this venv: the lock forks on the patch version (3.11.5), and the
        # cache holds the wheels of this interpreter's side of the fork.
        "UV_PYTHON": str(
            Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        ),
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if wheelhouse is not None:
        env["PIP_FIND_LINKS"] = str(wheelhouse)
    for value in env.values():
        assert " " not in value and '"' not in value, value

    last_error = ""
    for _attempt in range(3):
        port = _free_port()
        config = root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    f"PidFile {root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {authorized}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    f"AllowUsers {user}",
                    "UsePAM no",
                    "StrictModes no",
                    "PrintMotd no",
                    "PermitUserEnvironment no",
                    "SetEnv " + " ".join(f'"{k}={v}"' for k, v in env.items()),
                    "",
                ]
            )
        )
        log = root / "sshd.log"
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        if proc.poll() is None:
            known_hosts = root / "known_hosts"
            known_hosts.write_text(
                f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text().strip()}\n"
            )
            return SshServer(
                root=root,
                port=port,
                user=user,
                user_key=user_key,
                host_key=host_key,
                known_hosts=known_hosts,
                home=home,
                tmux_tmpdir=tmux_tmpdir,
                process=proc,
                log=log,
                env=env,
            )
        last_error = log.read_text(errors="replace").strip()
        if "Address already in use" not in last_error:
            break
    raise SshdUnavailable(f"sshd could not start: {last_error or 'no message'}")


def remote_sh(
    env_file: Path, *args: str, script: Path = REMOTE_SH, timeout: float = 120, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run scripts/remote.sh with only our env file as its settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENLACE_REMOTE_")}
    env["ENLACE_REMOTE_ENV"] = str(env_file)
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kwargs,  # type: ignore[arg-type]
    )
