"""The README's quick start is the whole set-up: its commands, run as written on a clean copy of the
repository (the tracked files only, no build outputs), on a machine where the system tools the tests
need are missing. scripts/test.sh must install them (scripts/install-system-deps.sh: apt-get, with
sudo when not root) before any stage, and say clearly what to do where it cannot.

The machine is simulated, never touched: PATH holds links to this machine's commands minus the
tools (and apt-get, sudo), plus a fake apt-get, apt-cache and sudo that record their arguments. A
failing install stops the run before its stages; a successful one (the fake apt-get puts stand-ins
for the tools on PATH) lets the stages start, against a fake uv that fails at once so the run ends
in seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The tools scripts/install-system-deps.sh looks up on PATH, and their Debian packages.
TOOLS = {
    "ssh": "openssh-client",
    "rsync": "rsync",
    "tmux": "tmux",
    "chromium": "chromium",
    "cmake": "cmake",
    "g++": "g++",
    "make": "make",
    "systemd-analyze": "systemd",
}
if not os.access("/usr/sbin/sshd", os.X_OK):  # looked up by its path: cannot be hidden, only absent
    TOOLS["/usr/sbin/sshd"] = "openssh-server"
HIDDEN = {*TOOLS, "apt-get", "apt-cache", "sudo", "id", "uv", "uvx"}


def quickstart_commands() -> list[str]:
    """The commands of the README's first bash block («Empezar en una máquina nueva»)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Empezar en una máquina nueva", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the quick start has no bash block"
    commands = [line.split("#", 1)[0].strip() for line in block[1].splitlines()]
    return [c for c in commands if c]


def clean_copy(dest: Path) -> Path:
    """The tracked files as they are in the working tree: what a fresh clone holds."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def fake(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def machine(
    tmp: Path, *, root: bool, sudo: bool, apt: bool, install_works: bool, uv: bool = True
) -> dict:
    """The environment of the simulated machine: its PATH, HOME and the call log."""
    bin_dir, log = tmp / "bin", tmp / "calls.log"
    bin_dir.mkdir()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        for entry in Path(d).glob("*") if Path(d).is_dir() else ():
            link = bin_dir / entry.name
            if entry.name not in HIDDEN and not link.exists() and os.access(entry, os.X_OK):
                link.symlink_to(entry)
    real_id = shutil.which("id")
    fake(
        bin_dir / "id",
        f'[ "$1" = -u ] && {{ echo {0 if root else 1000}; exit; }}\nexec {real_id} "$@"\n',
    )
    if uv:
        fake(
            bin_dir / "uv", f'echo "uv $*" >>{log}\necho "fake uv: no registry here" >&2\nexit 1\n'
        )
        fake(bin_dir / "uvx", f'echo "uvx $*" >>{log}\nexit 1\n')
    if sudo:
        fake(bin_dir / "sudo", f'echo "sudo $*" >>{log}\nexec "$@"\n')
    if apt:
        fake(bin_dir / "apt-cache", 'echo "  Candidate: 1.0"\n')
        stand_ins = " ".join(t for t in TOOLS if "/" not in t)
        on_install = (
            f'for t in {stand_ins}; do printf "#!/bin/sh\\nexit 0\\n" >{bin_dir}/$t; '
            f"chmod +x {bin_dir}/$t; done; exit 0"
            if install_works
            else 'echo "E: fake apt-get: no network here" >&2; exit 100'
        )
        fake(
            bin_dir / "apt-get",
            f'echo "apt-get $*" >>{log}\n[ "$1" = install ] || exit 0\n{on_install}\n',
        )
    log.touch()
    home = tmp / "home"
    home.mkdir()
    return {"PATH": str(bin_dir), "HOME": str(home), "LANG": "C.UTF-8", "LOG": str(log)}


def run_quickstart(tmp: Path, env: dict) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the README's test command, as written, in a clean copy; returns it and the call log."""
    clone = clean_copy(tmp / "enlace")
    [test_command] = [c for c in quickstart_commands() if "test.sh" in c]
    proc = subprocess.run(
        ["bash", "-c", test_command],
        cwd=clone,
        env={k: v for k, v in env.items() if k != "LOG"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, Path(env["LOG"]).read_text().splitlines()


def installs(calls: list[str], *, sudo: bool) -> list[str]:
    """The packages asked for by `apt-get install` (each try the same); every apt-get call went
    through sudo when `sudo`, none when not."""
    apt = [c for c in calls if c.startswith("apt-get")]
    assert [c for c in calls if c.startswith("sudo ")] == (
        [f"sudo {c}" for c in apt] if sudo else []
    )
    tries = {c for c in apt if c.startswith("apt-get install")}
    assert len(tries) == 1, calls
    return [w for w in tries.pop().split()[2:] if not w.startswith("-")]


def test_readme_quick_start_is_two_commands_train_and_test():
    assert quickstart_commands() == [
        "uv run enlace-train configs/runs/smoke-cpu.yaml",
        "scripts/test.sh",
    ]


@pytest.mark.parametrize("root", [True, False], ids=["root", "user-with-sudo"])
def test_test_sh_installs_the_missing_tools_before_any_stage(tmp_path, root):
    env = machine(tmp_path, root=root, sudo=True, apt=True, install_works=False)
    proc, calls = run_quickstart(tmp_path, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert sorted(installs(calls, sudo=not root)) == sorted(TOOLS.values()), calls
    assert not [c for c in calls if c.startswith("uv")], "a stage ran after a failed install"
    assert "=== tests:" not in out
    assert "scripts/install-system-deps.sh" in out  # how to retry by hand


def test_after_the_install_the_stages_run(tmp_path):
    env = machine(tmp_path, root=False, sudo=True, apt=True, install_works=True)
    proc, calls = run_quickstart(tmp_path, env)
    out = proc.stdout + proc.stderr
    assert sorted(installs(calls, sudo=True)) == sorted(TOOLS.values()), calls
    # Every stage started (each fails at once on the fake uv) and the timings were printed.
    assert proc.returncode == 1, out
    for stage in ("tests: enlace-config", "lint + types", "llama.cpp runs the GGUF export"):
        assert f"=== {stage}" in out
    assert "=== stage timings" in out


@pytest.mark.parametrize(
    ("sudo", "apt", "says"),
    [
        (False, True, "sudo is not available"),
        (True, False, "apt-get is not available"),
    ],
    ids=["no-sudo", "no-apt"],
)
def test_without_apt_or_sudo_it_says_what_to_do(tmp_path, sudo, apt, says):
    env = machine(tmp_path, root=False, sudo=sudo, apt=apt, install_works=False)
    proc, calls = run_quickstart(tmp_path, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert says in out
    for package in TOOLS.values():
        assert package in out
    assert not [c for c in calls if c.startswith(("uv", "apt-get"))], calls
    assert "Traceback" not in out


def test_without_uv_it_says_how_to_install_it_as_the_readme_does(tmp_path):
    env = machine(tmp_path, root=True, sudo=True, apt=True, install_works=False, uv=False)
    proc, calls = run_quickstart(tmp_path, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = "curl -LsSf https://astral.sh/uv/install.sh | sh"
    assert install in proc.stderr and install in readme
    assert calls == []
