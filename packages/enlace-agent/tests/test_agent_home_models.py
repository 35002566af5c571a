"""Model versions of the home server (`enlace-assistant model install | list | use | rollback`):
real GGUF files written here with the standard library, refusals that leave the current version
as it was, and two `use` at once."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from enlace_agent import model_versions as mv
from enlace_agent.cli.assistant import main


@pytest.fixture
def config(tmp_path: Path) -> Path:
    file = tmp_path / "assistant.yaml"
    data = {"web": {"home": {"models_dir": str(tmp_path / "models")}}}
    file.write_text(json.dumps(data), encoding="utf-8")
    return file


def test_read_gguf_metadata(gguf: Callable[..., Path], tmp_path: Path) -> None:
    meta = mv.read_gguf(gguf(tmp_path / "m.gguf", "enlace-chat-v2"))
    assert meta == {
        "general.architecture": "llama",
        "general.name": "enlace-chat-v2",
        "general.languages": ["es"],
    }


def test_install_list_use_rollback(
    gguf: Callable[..., Path], in_process: Callable[..., Any], config: Path, tmp_path: Path
) -> None:
    first = gguf(tmp_path / "a.gguf", "enlace-chat")
    second = gguf(tmp_path / "b.gguf", "enlace-chat-v2", rows=8)
    ran = in_process(main, "model", "install", str(first), "--name", "v1", "--config", str(config))
    assert ran.returncode == 0, ran.stderr
    assert "model use v1" in ran.stdout
    ran = in_process(
        main, "model", "install", str(second), "--name", "v2", "--use", "--config", str(config)
    )
    assert ran.returncode == 0, ran.stderr
    models = tmp_path / "models"
    assert os.readlink(models / mv.CURRENT) == "v2/model.gguf"
    assert (models / mv.CURRENT).read_bytes() == second.read_bytes()
    listed = in_process(main, "model", "list", "--config", str(config)).stdout
    assert "* v2  (enlace-chat-v2" in listed and "  v1  (enlace-chat," in listed
    record = json.loads((models / "v1" / mv.VERSION_FILE).read_text())
    assert record["metadata"]["general.name"] == "enlace-chat" and len(record["sha256"]) == 64
    assert in_process(main, "model", "use", "v1", "--config", str(config)).returncode == 0
    assert mv.current_name(models) == "v1"
    back = in_process(main, "model", "rollback", "--config", str(config))
    assert back.returncode == 0 and "versión v2" in back.stdout
    assert mv.current_name(models) == "v2"


@pytest.mark.parametrize("damage", ["not_gguf", "truncated", "cut_header"])
def test_refused_files_keep_the_current_version(
    gguf: Callable[..., Path],
    in_process: Callable[..., Any],
    config: Path,
    tmp_path: Path,
    damage: str,
) -> None:
    good = gguf(tmp_path / "good.gguf")
    assert (
        in_process(
            main, "model", "install", str(good), "--name", "good", "--use", "--config", str(config)
        ).returncode
        == 0
    )
    bad = tmp_path / "bad.gguf"
    if damage == "not_gguf":
        bad.write_bytes(b"PK\x03\x04 a zip, not a model" * 10)
    elif damage == "truncated":
        gguf(bad, cut=9)  # the tensor's last bytes are missing
    else:
        bad.write_bytes(gguf(tmp_path / "x.gguf").read_bytes()[:40])
    ran = in_process(main, "model", "install", str(bad), "--name", "bad", "--config", str(config))
    assert ran.returncode == 2
    expected = {"not_gguf": "no es un modelo GGUF", "truncated": "cortado", "cut_header": "cortado"}
    assert expected[damage] in ran.stderr and "Traceback" not in ran.stderr
    models = tmp_path / "models"
    assert not (models / "bad").exists()
    assert [p.name for p in models.iterdir() if p.name.startswith(".install")] == []
    assert mv.current_name(models) == "good"


def test_deeply_nested_metadata_is_refused_and_keeps_the_current_version(
    gguf: Callable[..., Path], in_process: Callable[..., Any], config: Path, tmp_path: Path
) -> None:
    """An array of an array of ... 50,000 deep (each holding one): a RecursionError once."""
    good = gguf(tmp_path / "good.gguf")
    ran = in_process(
        main, "model", "install", str(good), "--name", "good", "--use", "--config", str(config)
    )
    assert ran.returncode == 0, ran.stderr
    key = b"general.bomb"
    nested = (
        struct.pack("<IIQ", 9, 9, 1)
        + struct.pack("<IQ", 9, 1) * 49_999
        + struct.pack("<IQ", 4, 1)
        + struct.pack("<I", 7)
    )
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + nested
    bomb = tmp_path / "bomb.gguf"
    bomb.write_bytes(head)
    ran = in_process(main, "model", "install", str(bomb), "--name", "bomb", "--config", str(config))
    assert ran.returncode == 2, ran.stderr
    assert "anida" in ran.stderr and "general.bomb" in ran.stderr, ran.stderr
    assert "inesperado" not in ran.stderr and "Traceback" not in ran.stderr
    models = tmp_path / "models"
    assert not (models / "bomb").exists() and mv.current_name(models) == "good"


def test_use_refuses_a_changed_file(
    gguf: Callable[..., Path], in_process: Callable[..., Any], config: Path, tmp_path: Path
) -> None:
    for name in ("v1", "v2"):
        path = gguf(tmp_path / f"{name}.gguf", name)
        in_process(main, "model", "install", str(path), "--name", name, "--config", str(config))
    models = tmp_path / "models"
    assert in_process(main, "model", "use", "v1", "--config", str(config)).returncode == 0
    installed = models / "v2" / mv.MODEL_FILE
    data = bytearray(installed.read_bytes())
    data[-1] ^= 0xFF  # one flipped byte in the weights
    installed.write_bytes(bytes(data))
    ran = in_process(main, "model", "use", "v2", "--config", str(config))
    assert ran.returncode == 2 and "sha256 no coincide" in ran.stderr
    assert mv.current_name(models) == "v1"
    unknown = in_process(main, "model", "use", "v9", "--config", str(config))
    assert unknown.returncode == 2 and "v1, v2" in unknown.stderr


def test_two_use_at_once_leave_one_whole_choice(gguf: Callable[..., Path], tmp_path: Path) -> None:
    models = tmp_path / "models"
    for name in ("v1", "v2"):
        mv.install(models, gguf(tmp_path / f"{name}.gguf", name, rows=64), name)
    mv.use(models, "v1")
    seen_missing: list[bool] = []
    stop = threading.Event()

    def watch() -> None:  # the model service never finds the link missing
        while not stop.is_set():
            seen_missing.append(not (models / mv.CURRENT).exists())

    watcher = threading.Thread(target=watch)
    watcher.start()
    # two processes (two `model use` from two terminals), each switching 30 times
    code = (
        "import sys; from pathlib import Path; from enlace_agent import model_versions as mv\n"
        "for _ in range(30): mv.use(Path(sys.argv[1]), sys.argv[2])"
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", code, str(models), n], stderr=subprocess.PIPE)
        for n in ("v1", "v2")
    ]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()
    stop.set()
    watcher.join()
    assert not any(seen_missing)
    assert mv.current_name(models) in ("v1", "v2")
    history = json.loads((models / mv.HISTORY).read_text())
    assert sorted(history) == ["v1", "v2"]
    assert history[-1] == mv.current_name(models)  # the history and the link agree
    assert [p.name for p in models.iterdir() if p.name.startswith(f".{mv.CURRENT}")] == []


def test_the_same_file_twice_is_one_version(
    gguf: Callable[..., Path], in_process: Callable[..., Any], config: Path, tmp_path: Path
) -> None:
    model = gguf(tmp_path / "a.gguf")
    assert in_process(main, "model", "install", str(model), "--config", str(config)).returncode == 0
    again = in_process(main, "model", "install", str(model), "--config", str(config))
    assert again.returncode == 0 and "ya estaba instalado" in again.stdout
    assert len(mv.versions(tmp_path / "models")) == 1
