"""scripts/build-llama-server.sh: run twice at once it builds llama.cpp once and both get the
binary; on x86-64 it builds without AMX; a cached build made with other options is made again.

Two runs at once happen: the llamacpp and chat stages, a developer's helper while CI runs, two
`install-home-server.sh`. Without a lock the second run's `rm -rf build` pulled the folder from
under the first one's compiler ("opening dependency file ... No such file or directory"), a
15-minute build lost. Here `uvx` and `cmake` are stand-ins on PATH (the script's own logic runs
unchanged): the stand-in build notices a folder replaced under it and fails, as the compiler did.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERSION = "9.9.9"

FAKE_UVX = """#!/usr/bin/env bash
# uvx --quiet --from pip pip download ... -d DIR: hands over the prepared sdist
while [ $# -gt 0 ]; do [ "$1" = -d ] && { cp "$FAKE_SDIST" "$2/"; exit 0; }; shift; done
exit 1
"""

FAKE_CMAKE = """#!/usr/bin/env bash
# configure (-S SRC -B DIR): stamps the build folder; --build DIR: fails if the folder was
# replaced while it "compiled", as the real compiler does when its object folder vanishes
if [ "$1" = --build ]; then
  dir=$2; stamp=$(cat "$dir/stamp") || exit 1
  echo build >> "$FAKE_LOG"
  sleep 1.5
  [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ] || { echo "build folder replaced" >&2; exit 1; }
  mkdir -p "$dir/bin" && touch "$dir/bin/libllama.so" && printf '#!/bin/sh\\n' > "$dir/bin/llama-server"
  chmod +x "$dir/bin/llama-server"; exit 0
fi
echo "$*" >> "$FAKE_LOG.configure"
while [ $# -gt 0 ]; do [ "$1" = -B ] && { mkdir -p "$2" && echo "$RANDOM$$" > "$2/stamp"; }; shift; done
"""


@pytest.fixture
def checkout(tmp_path: Path) -> dict[str, str]:
    if shutil.which("flock") is None:
        pytest.skip("flock (util-linux) is not installed")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "build-llama-server.sh", repo / "scripts")
    src = tmp_path / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("# stand-in\n")
    sdist = tmp_path / f"llama_cpp_python-{VERSION}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tmp_path / "src" / f"llama_cpp_python-{VERSION}", f"llama_cpp_python-{VERSION}")
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    (repo / "uv.lock").write_text(
        f'[[package]]\nname = "llama-cpp-python"\nversion = "{VERSION}"\n'
        f'sdist = {{ url = "https://example.invalid/x.tar.gz", hash = "sha256:{sha}", size = 1 }}\n'
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("uvx", FAKE_UVX), ("cmake", FAKE_CMAKE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "FAKE_SDIST": str(sdist),
        "FAKE_LOG": str(tmp_path / "builds.log"),
        "REPO": str(repo),
    }


def test_two_runs_at_once_build_once_and_both_succeed(checkout: dict[str, str]) -> None:
    script = Path(checkout["REPO"]) / "scripts" / "build-llama-server.sh"
    runs = [
        subprocess.Popen(
            ["bash", str(script)],
            env=checkout,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [run.communicate(timeout=60) for run in runs]
    for run, (_, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, err
    expected = f"{checkout['XDG_CACHE_HOME']}/enlace/llama.cpp-{VERSION}/build/bin/llama-server"
    assert [out.strip() for out, _ in results] == [expected, expected]
    assert Path(checkout["FAKE_LOG"]).read_text().splitlines() == ["build"]


def run(checkout: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(checkout["REPO"]) / "scripts" / "build-llama-server.sh"
    return subprocess.run(["bash", str(script)], env=checkout, capture_output=True, text=True)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="AMX is an x86-64 extension")
def test_x86_builds_without_amx(checkout: dict[str, str]) -> None:
    """ggml's AMX kernel for q8_0 died with SIGILL (tileloadd) in CI's virtual machine, a Xeon
    whose -march=native turns AMX on: the build turns it off explicitly."""
    assert run(checkout).returncode == 0
    configure = Path(checkout["FAKE_LOG"] + ".configure").read_text()
    for flag in ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"):
        assert f"-DCMAKE_C_FLAGS={flag}" in configure or f" {flag}" in configure, configure
        assert "-DCMAKE_CXX_FLAGS=" in configure


def test_a_build_made_with_other_options_is_made_again(checkout: dict[str, str]) -> None:
    """A cache from before a change of options (no record of them, or another) is rebuilt once;
    then it is used as it is."""
    cache = Path(checkout["XDG_CACHE_HOME"]) / "enlace" / f"llama.cpp-{VERSION}" / "build"
    (cache / "bin").mkdir(parents=True)
    (cache / "bin" / "libllama.so").touch()
    (cache / "bin" / "llama-server").write_text("#!/bin/sh\n")
    (cache / "bin" / "llama-server").chmod(0o755)
    assert run(checkout).returncode == 0
    assert run(checkout).returncode == 0
    assert Path(checkout["FAKE_LOG"]).read_text().splitlines() == ["build"]
