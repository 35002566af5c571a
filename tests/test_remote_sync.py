"""scripts/remote.sh against a real sshd on 127.0.0.1: settings, connection errors, sync, setup, quoting.

The local side is a small stand-in repository (a copy of remote.sh beside a tiny uv project), so the
"a second sync sends nothing" checks do not race the developers editing the real checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remote_fixtures as rf


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rf.SshServer]:
    root = tmp_path_factory.mktemp("sshd")
    wheelhouse = rf.build_uv_wheel(root / "wheelhouse").parent
    try:
        srv = rf.start_sshd(root / "server", wheelhouse=wheelhouse)
    except rf.SshdUnavailable as exc:
        pytest.skip(f"no OpenSSH server for the remote.sh tests: {exc}")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def local_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in checkout: what a run needs, plus everything sync must leave behind."""
    repo = tmp_path_factory.mktemp("local") / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(rf.REMOTE_SH, repo / "scripts" / "remote.sh")
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "remote-fixture"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        "dependencies = []\n"
    )
    subprocess.run(
        [str(rf.uv_binary()), "lock", "--offline", "-q"], cwd=repo, check=True, timeout=60
    )
    files = {
        "README.md": "hola\n",
        "packages/enlace-x/src/enlace_x/__init__.py": "X = 1\n",
        "packages/enlace-x/src/enlace_x/gone.py": "deleted locally later\n",
        "configs/runs/tiny.yaml": "run:\n  name: tiny\n",
        # never synced:
        ".env": "ENLACE_REMOTE_HOST=secret\n",
        "configs/.env.local": "SECRET=1\n",
        "packages/enlace-x/.env": "SECRET=1\n",
        ".venv/bin/python": "not a python\n",
        "packages/enlace-x/src/enlace_x/__pycache__/x.cpython-311.pyc": "bytecode\n",
        "runs/old/metrics.jsonl": "{}\n",
        "data/smoke/train.bin": "tokens\n",
        "data/big/train.bin": "many tokens\n",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return repo


def run_local(repo: Path, env_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return rf.remote_sh(env_file, *args, script=repo / "scripts" / "remote.sh")


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("remote.sh: "), lines[0]
    return lines[0]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# --- sync ---------------------------------------------------------------------------------------


def test_sync_sends_what_a_run_needs_and_a_second_sync_sends_nothing(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    remote_dir = tmp_path / "remote" / "enlace"  # parents missing: sync creates them
    env = server.write_env(tmp_path / "env", remote_dir)

    first = run_local(local_repo, env, "sync")
    assert first.returncode == 0, first.stderr
    assert tree(remote_dir) == {
        "pyproject.toml",
        "uv.lock",
        "README.md",
        "scripts/remote.sh",
        "packages/enlace-x/src/enlace_x/__init__.py",
        "packages/enlace-x/src/enlace_x/gone.py",
        "configs/runs/tiny.yaml",
    }
    assert "sync: 7 files sent, 0 deleted" in first.stdout
    stamps = {p: p.stat().st_mtime_ns for p in remote_dir.rglob("*")}

    second = run_local(local_repo, env, "sync", "-v")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("sync: 0 files sent, 0 deleted"), second.stdout
    assert {p: p.stat().st_mtime_ns for p in remote_dir.rglob("*")} == stamps

    # A change and a deletion travel; nothing else does.
    init = local_repo / "packages/enlace-x/src/enlace_x/__init__.py"
    gone = local_repo / "packages/enlace-x/src/enlace_x/gone.py"
    init.write_text("X = 2\n")
    gone.unlink()
    try:
        third = run_local(local_repo, env, "sync", "-v")
    finally:
        gone.write_text("deleted locally later\n")
    assert third.returncode == 0, third.stderr
    assert "sync: 1 files sent, 1 deleted" in third.stdout
    assert "packages/enlace-x/src/enlace_x/__init__.py" in third.stdout
    assert (remote_dir / "packages/enlace-x/src/enlace_x/__init__.py").read_text() == "X = 2\n"
    assert not (remote_dir / "packages/enlace-x/src/enlace_x/gone.py").exists()


def test_sync_data_only_when_asked(server: rf.SshServer, local_repo: Path, tmp_path: Path) -> None:
    remote_dir = tmp_path / "remote"
    env = server.write_env(tmp_path / "env", remote_dir)
    result = run_local(local_repo, env, "sync", "--data", str(local_repo / "data" / "smoke"))
    assert result.returncode == 0, result.stderr
    assert (remote_dir / "data/smoke/train.bin").read_text() == "tokens\n"
    assert not (remote_dir / "data/big").exists()
    assert not (remote_dir / "runs").exists()

    outside = run_local(local_repo, env, "sync", "--data", str(tmp_path))
    assert outside.returncode == 2
    assert "must be inside the repository" in one_line_error(outside)
    missing = run_local(local_repo, env, "sync", "--data", str(local_repo / "data" / "nope"))
    assert missing.returncode == 2
    assert "no such file" in one_line_error(missing)


# --- setup --------------------------------------------------------------------------------------


def test_setup_installs_uv_when_missing_and_is_idempotent(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    remote_dir = tmp_path / "remote"
    env = server.write_env(tmp_path / "env", remote_dir)

    before_sync = run_local(local_repo, env, "setup")
    assert before_sync.returncode == 1
    assert "run scripts/remote.sh sync first" in one_line_error(before_sync)

    assert run_local(local_repo, env, "sync").returncode == 0
    probe = server.ssh("command -v uv || echo no-uv")
    assert probe.stdout.strip() == "no-uv", "uv must be absent from the server's PATH at first"

    first = run_local(local_repo, env, "setup")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "uv not found; installing it" in first.stdout
    assert f"setup: installed uv {_uv_version()}" in first.stdout
    assert f"at {server.home}/.local/bin/uv" in first.stdout
    assert (remote_dir / ".venv" / "bin" / "python").exists()
    assert "setup: done" in first.stdout

    second = run_local(local_repo, env, "setup")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"uv already installed: uv {_uv_version()}" in second.stdout
    assert "installing" not in second.stdout
    assert "setup: done" in second.stdout


def _uv_version() -> str:
    return subprocess.run(
        [str(rf.uv_binary()), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]


# --- settings and connection errors: one line, non-zero exit, nothing done ----------------------


def test_missing_settings_name_the_setting(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    env = server.write_env(tmp_path / "env", tmp_path / "remote", ENLACE_REMOTE_HOST=None)
    result = run_local(local_repo, env, "sync")
    assert result.returncode == 2
    assert "missing setting ENLACE_REMOTE_HOST" in one_line_error(result)

    nowhere = run_local(local_repo, tmp_path / "no-such-env", "status")
    assert nowhere.returncode == 2
    assert "does not exist" in one_line_error(nowhere)

    typo = server.write_env(tmp_path / "env2", tmp_path / "remote")
    typo.write_text(typo.read_text() + "ENLACE_REMOTE_PROT=22\n")
    result = run_local(local_repo, typo, "status")
    assert result.returncode == 2
    assert "unknown setting ENLACE_REMOTE_PROT" in one_line_error(result)
    assert not (tmp_path / "remote").exists()


def test_env_file_is_parsed_never_executed(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "executed"
    env = server.write_env(tmp_path / "env", tmp_path / "remote")
    hostile = tmp_path / "hostile-env"
    hostile.write_text(
        env.read_text().replace(
            "ENLACE_REMOTE_HOST=127.0.0.1", f"ENLACE_REMOTE_HOST=$(touch {marker})"
        )
    )
    result = run_local(local_repo, hostile, "sync")
    assert result.returncode == 2
    assert "is not a host name" in one_line_error(result)

    hostile.write_text(env.read_text() + f"touch {marker}\n")
    result = run_local(local_repo, hostile, "sync")
    assert result.returncode == 2
    assert "expected KEY=VALUE" in one_line_error(result)
    assert not marker.exists()
    assert not (tmp_path / "remote").exists()


def test_unreachable_host_fails_in_one_line(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    closed_port = str(rf._free_port())
    env = server.write_env(tmp_path / "env", tmp_path / "remote", ENLACE_REMOTE_PORT=closed_port)
    for verb in (["sync"], ["setup"], ["status"], ["stop", "x"], ["pull", "x"]):
        result = run_local(local_repo, env, *verb)
        assert result.returncode == 1, verb
        line = one_line_error(result)
        assert f"cannot reach 127.0.0.1:{closed_port}" in line and "refused" in line, line
    assert not (tmp_path / "remote").exists()


def test_host_key_problems_stop_before_anything_is_sent(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    remote_dir = tmp_path / "remote"
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    env = server.write_env(tmp_path / "env", remote_dir, ENLACE_REMOTE_KNOWN_HOSTS=str(empty))
    result = run_local(local_repo, env, "sync")
    assert result.returncode == 1
    assert "is not in" in one_line_error(result)
    assert empty.read_text() == "", "strict checking must never add keys by itself"

    impostor = tmp_path / "impostor"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor)], check=True)
    changed = tmp_path / "known_hosts_changed"
    changed.write_text(f"[127.0.0.1]:{server.port} {impostor.with_suffix('.pub').read_text()}")
    env = server.write_env(tmp_path / "env", remote_dir, ENLACE_REMOTE_KNOWN_HOSTS=str(changed))
    result = run_local(local_repo, env, "sync")
    assert result.returncode == 1
    assert "has CHANGED" in one_line_error(result)
    assert not remote_dir.exists()


def test_refused_login_names_the_key(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    env = server.write_env(tmp_path / "env", tmp_path / "remote", ENLACE_REMOTE_KEY=str(stranger))
    result = run_local(local_repo, env, "sync")
    assert result.returncode == 1
    assert "refused the login" in one_line_error(result)
    assert not (tmp_path / "remote").exists()


def test_usage_errors_exit_2(local_repo: Path, tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.write_text("ENLACE_REMOTE_HOST=h\nENLACE_REMOTE_USER=u\nENLACE_REMOTE_DIR=d\n")
    for args in (["frobnicate"], [], ["logs", "a;b"], ["stop"], ["pull", "../x"], ["run"]):
        result = run_local(local_repo, env, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("remote.sh: "), result.stderr


# --- quoting ------------------------------------------------------------------------------------


def test_hostile_remote_dir_is_data_on_both_sides(
    server: rf.SshServer, local_repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    remote_dir = tmp_path / f'it\'s a "dir"; touch {marker}; $(touch {marker}) `touch {marker}`'
    env = tmp_path / "env"
    server.write_env(env, "placeholder")
    env.write_text(
        env.read_text().replace(
            "ENLACE_REMOTE_DIR=placeholder",
            "ENLACE_REMOTE_DIR=" + str(remote_dir).replace("\\", "\\\\"),
        )
    )
    result = run_local(local_repo, env, "sync")
    assert result.returncode == 0, result.stderr
    assert (remote_dir / "configs/runs/tiny.yaml").exists()
    status = run_local(local_repo, env, "status")
    assert status.returncode == 0, status.stderr
    assert "no runs started with remote.sh" in status.stdout
    assert not marker.exists()
