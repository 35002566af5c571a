"""The schema registry, the `enlace-config` CLI, and the promise that checking never imports torch."""

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from enlace_config import (
    ConfigError,
    check_file,
    known_folders,
    registry,
    schema_for,
)
from enlace_config.cli import main
from enlace_config.schema.base import StrictModel
from enlace_config.schema.corpus import CorpusConfig
from enlace_config.schema.model import ModelConfig

WriteTree = Callable[..., Path]  # the conftest fixture


class WidgetConfig(StrictModel):
    size: int = Field(..., gt=0, description="How big.")
    color: str = Field("red", description="Which color.")


@pytest.fixture
def widgets_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.SCHEMAS, "widgets", f"{__name__}:WidgetConfig")


# ---------------------------------------------------------------------------------- registry


def test_registry_lists_the_slots_and_the_other_kinds() -> None:
    folders = known_folders()
    assert folders[:5] == ["runs", "hardware", "model", "train", "data"]
    assert "corpus" in folders
    assert schema_for("model") is ModelConfig
    assert schema_for("corpus") is CorpusConfig
    assert schema_for("nothing-here") is None
    for folder in folders:
        model = schema_for(folder)
        assert model is not None and issubclass(model, BaseModel), folder


def test_a_schema_entry_that_is_not_a_model_is_a_type_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(registry.SCHEMAS, "widgets", f"{__name__}:WriteTree")
    with pytest.raises(TypeError, match="not a pydantic model"):
        schema_for("widgets")


def test_the_repository_agent_files_validate_with_their_own_schemas() -> None:
    """configs/agent/ holds two kinds of file: search.yaml and assistant.yaml."""
    from enlace_config.compose import check_file
    from enlace_config.schema.agent import AssistantConfig, SearchConfig

    agent = Path(__file__).resolve().parents[3] / "configs" / "agent"
    assert isinstance(check_file(agent / "search.yaml").config, SearchConfig)
    assert check_file(agent / "assistant.yaml").config == AssistantConfig()
    assert schema_for("agent", "assistant") is AssistantConfig
    assert schema_for("agent", "anything-else") is SearchConfig


def test_registered_schema_is_used_by_check(
    write_tree: WriteTree, widgets_registered: None
) -> None:
    root = write_tree(
        {
            "widgets/ok.yaml": "size: 3\ncolor: no\n",
            "widgets/bad.yaml": "size: 0\ncolour: blue\n",
            "widgets/derived.yaml": "include: widgets/ok.yaml\nsize: 4\n",
        }
    )
    ok = check_file(root / "widgets/ok.yaml")
    assert ok.kind == "widgets" and isinstance(ok.config, WidgetConfig)
    assert ok.config.color == "no"
    assert check_file(root / "widgets/derived.yaml").to_dict() == {"size": 4, "color": "no"}
    with pytest.raises(ConfigError) as info:
        check_file(root / "widgets/bad.yaml")
    msg = str(info.value)
    assert "configs/widgets/bad.yaml:1: size: got 0" in msg
    assert "configs/widgets/bad.yaml:2: colour: unknown key; did you mean 'color'?" in msg


def test_unregistered_folder_is_an_error(write_tree: WriteTree) -> None:
    root = write_tree({"gadgets/x.yaml": "a: 1\n"})
    with pytest.raises(ConfigError) as info:
        check_file(root / "gadgets/x.yaml")
    assert "no schema for files in configs/gadgets/" in str(info.value)


def test_layer_of_another_kind_cannot_be_included_in_a_registered_kind(
    write_tree: WriteTree, widgets_registered: None
) -> None:
    root = write_tree({"widgets/x.yaml": "include: model/tiny.yaml\n"})
    with pytest.raises(ConfigError, match="wrong slot"):
        check_file(root / "widgets/x.yaml")


# ---------------------------------------------------------------------------------- CLI


def test_check_ok(write_tree: WriteTree, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_tree()
    rc = main(["check", str(root / "runs/base.yaml"), str(root / "model/tiny.yaml")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "ok   " in out and "(runs)" in out and "(model)" in out


def test_check_reports_every_bad_file_and_exits_2(
    write_tree: WriteTree, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_tree({"model/bad.yaml": "include: model/tiny.yaml\nn_heads: 5\n"})
    rc = main(
        [
            "check",
            str(root / "runs/base.yaml"),
            str(root / "model/bad.yaml"),
            str(root / "runs/missing.yaml"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "configs/model/bad.yaml:2: n_heads: 5 heads do not divide d_model 32" in err
    assert "file not found: configs/runs/missing.yaml" in err
    assert "2 of 3 file(s) failed" in err
    assert "Traceback" not in err


def test_show_prints_resolved_yaml_with_origins(
    write_tree: WriteTree, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_tree()
    rc = main(["show", str(root / "runs/base.yaml"), "train.lr=1e-3", "--origin"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "  lr: 0.001  # command line override `train.lr=1e-3`" in out
    assert "  max_steps: 10  # configs/train/short.yaml:1" in out
    assert "  name: base  # default (the run file's name)" in out
    rc = main(["show", str(root / "model/tiny.yaml")])
    out = capsys.readouterr().out
    assert rc == 0 and "d_model: 32\n" in out and "#  " not in out


def test_bad_input_exits_2_without_traceback(
    write_tree: WriteTree, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_tree()
    rc = main(["show", str(root / "runs/base.yaml"), "train.lr=abc", "oops"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "command line override `train.lr=abc`: train.lr: got 'abc'" in err
    assert "command line override `oops`" in err
    assert "Traceback" not in err
    rc = main(["--debug", "show", str(root / "runs/base.yaml"), "train.lr=abc"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" in err
    rc = main(["show", str(root / "runs/base.yaml"), "train.lr=abc", "--debug"])
    assert rc == 2 and "Traceback" in capsys.readouterr().err


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["check"])
    assert info.value.code == 2


def test_check_in_a_subprocess_never_imports_torch(write_tree: WriteTree) -> None:
    root = write_tree()
    files = [str(root / "runs/base.yaml"), *(str(p) for p in sorted(root.glob("*/*.yaml")))]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "enlace_config.cli", "check", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    imported = [
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert "enlace_config.compose" in imported  # the import trace is real
    heavy = [m for m in imported if m.split(".")[0] in {"torch", "numpy", "enlace_model"}]
    assert heavy == []
    assert proc.stdout.count("ok   ") == len(files)


def test_version_comes_from_installed_metadata() -> None:
    from importlib.metadata import version

    import enlace_config

    assert enlace_config.__version__ == version("enlace-config")


def test_keys_lists_types_defaults_and_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "train"]) == 0
    out = capsys.readouterr().out
    assert "lr  (float; required)\n    Peak learning rate" in out
    assert "decay_shape  (linear | cosine | 1-sqrt; default: linear)" in out
    assert "init_from  (str | null; default: null)" in out
    assert main(["keys"]) == 0
    out = capsys.readouterr().out
    assert "run.name  (str; default: the run file's stem)" in out
    assert "hardware.dtype  (float32 | float16 | bfloat16; default: float32)" in out
    assert "model.d_model  (int; required)" in out
    assert main(["keys", "nope"]) == 2
    assert "unknown kind 'nope'" in capsys.readouterr().err


def test_every_schema_key_has_a_description() -> None:
    # Descriptions are the fields' docstrings: a key without one would leave `keys` silent. (An
    # install without the .py sources would too; run from the repository, that half cannot show.)
    for folder in known_folders():
        schema_for(folder)  # imports every schema module

    def subclasses(cls: type[StrictModel]) -> list[type[StrictModel]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    missing = [
        f"{model.__name__}.{name}"
        for model in subclasses(StrictModel)
        if model.__module__.startswith("enlace_config.")
        for name, info in model.model_fields.items()
        if not info.description
    ]
    assert missing == []
    assert len(subclasses(StrictModel)) > 15
