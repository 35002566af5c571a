"""Every file in configs/ validates with the schema of its folder (litgpt's config-hub test).

Run files are composed from their layers and validated whole; layer files validate as complete
sections; files of other kinds (corpus, agent) with the schema the registry names for their folder.
A new folder in configs/ needs a schema in enlace_config.registry, or this test fails.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from enlace_config import (
    ResolvedConfig,
    check_file,
    kind_of,
    known_folders,
    load_run_config,
)
from enlace_data.tokenizer import ByteTokenizer

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
ALL_FILES = sorted(CONFIGS.rglob("*.yaml")) + sorted(CONFIGS.rglob("*.yml"))
RUN_FILES = sorted((CONFIGS / "runs").glob("*.yaml"))


def _id(path: Path) -> str:
    return path.relative_to(CONFIGS).as_posix()


@pytest.mark.parametrize("path", ALL_FILES, ids=_id)
def test_config_file_validates(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # From an empty working directory: validation checks the config, not the world (no data/).
    monkeypatch.chdir(tmp_path)
    loaded = check_file(path)
    assert loaded.kind == kind_of(path)


@pytest.mark.parametrize("path", ALL_FILES, ids=_id)
def test_config_file_explains_itself(path: Path) -> None:
    assert any(line.lstrip().startswith("#") for line in path.read_text().splitlines()), (
        f"{_id(path)} has no comment saying why its values are what they are"
    )


def test_every_folder_has_a_schema() -> None:
    folders = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())
    missing = [f for f in folders if f not in known_folders()]
    assert missing == [], f"configs/{missing} has no schema: add it to enlace_config.registry"
    assert {"runs", "hardware", "model", "train", "data"} <= set(folders)


EXPECTED_RUNS = {
    "smoke-cpu": ("cpu", "smoke", "smoke", "smoke-bytes"),
    "smoke-2060": ("turing-2060", "smoke", "smoke", "smoke-bytes"),
    "pretrain-2060": ("turing-2060", "tiny-50m", "pretrain", "corpus"),
    "smoke-5090": ("blackwell-5090", "smoke", "smoke", "smoke-bytes"),
    "pretrain-5090": ("blackwell-5090", "tiny-50m", "pretrain", "corpus"),
}


def _run(name: str) -> ResolvedConfig:
    return load_run_config(CONFIGS / "runs" / f"{name}.yaml")


@pytest.mark.parametrize("name", sorted(EXPECTED_RUNS))
def test_run_composes_the_layers_the_issue_names(name: str) -> None:
    resolved = _run(name)
    assert resolved.config.run.name == name and resolved.config.run.out_dir == f"runs/{name}"
    probe = {"hardware": "device", "model": "d_model", "train": "max_steps", "data": "kind"}
    for (slot, key), layer in zip(probe.items(), EXPECTED_RUNS[name], strict=True):
        origin = resolved.origins[f"{slot}.{key}"]
        assert origin.file is not None and origin.file.name == f"{layer}.yaml", (slot, origin)
    # Accumulation is derived and whole on one device.
    assert resolved.config.grad_accumulation_steps() >= 1


def test_all_expected_runs_exist() -> None:
    assert {p.stem for p in RUN_FILES} >= set(EXPECTED_RUNS)


def test_tiny_50m_is_exactly_the_benchmark_shape() -> None:
    m = _run("pretrain-2060").config.model
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden) == (512, 8, 8, 2, 1536)
    assert (m.vocab_size, m.context_length, m.tie_embeddings) == (32768, 1024, True)
    assert _run("pretrain-5090").config.model == m


def test_hardware_profiles() -> None:
    cpu = _run("smoke-cpu").config
    assert (cpu.hardware.device, cpu.hardware.dtype) == ("cpu", "float32")
    # a short OpenMP spin: sleeping at once slows a quiet machine, libgomp's 300,000 a loaded one
    assert 0 < cpu.hardware.openmp_spin_count < 300_000
    h2060 = _run("pretrain-2060").config.hardware
    assert (h2060.device, h2060.dtype, h2060.loss_scaling) == ("cuda", "float16", True)
    assert h2060.attention == "mem_efficient" and h2060.peak_flops
    h5090 = _run("pretrain-5090").config.hardware
    assert (h5090.device, h5090.dtype, h5090.attention) == ("cuda", "bfloat16", "flash")
    assert h5090.peak_flops and h5090.peak_flops > h2060.peak_flops


def test_smoke_runs_read_bytes_with_the_builtin_fallback() -> None:
    for name in ("smoke-cpu", "smoke-2060", "smoke-5090"):
        cfg = _run(name).config
        assert cfg.data.kind == "bytes" and cfg.data.fallback == "builtin"
        assert cfg.model.vocab_size >= ByteTokenizer.vocab_size  # bytes and the chat tokens
    for name in ("pretrain-2060", "pretrain-5090"):
        cfg = _run(name).config
        assert cfg.data.kind == "shards" and cfg.train.decay_steps > 0  # WSD


def test_sft_runs_start_from_their_base_run() -> None:
    for name, base in (
        ("warmup-cpu", "smoke-cpu-copy"),
        ("sft-cpu", "warmup-cpu"),
        ("warmup-cpu-long", "smoke-cpu-copy-long"),
        ("sft-cpu-long", "warmup-cpu-long"),
        ("sft-2060", "pretrain-2060"),
        ("sft-5090", "pretrain-5090"),
    ):
        cfg = _run(name).config
        assert cfg.data.kind == "chat" and cfg.train.init_from == f"runs/{base}"
        network = {"context_length"}  # the rest is the base's network, so its weights load
        first = {"warmup-cpu": "smoke-cpu-copy", "warmup-cpu-long": "smoke-cpu-copy-long"}
        base_model = _run(first.get(base, base)).config.model
        assert cfg.model.model_dump(exclude=network) == base_model.model_dump(exclude=network)
    assert _run("sft-5090").config.hardware.attention != "flash"  # compiled: a mask


def test_the_longer_cpu_recipe_differs_from_the_script_where_it_says_alone() -> None:
    """`scripts/chat-cpu.sh --long` runs the *-long.yaml twins of the script's runs: the base with
    its records beside the book rows, twice the steps and «A B A» rows in their second half, the
    fine-tuning with more rows and steps, each from the run
    before it, so what the recipe measures is those changes, not a drifted copy."""
    twins = {
        "smoke-cpu-copy": {"copy_records_beside": True, "copy_records_share": 0.75,
                           "copy_records_steps": 876, "max_steps": 700, "decay_steps": 200,
                           "aba_rows_share": 1.0, "aba_rows_from": 350},
        "warmup-cpu": {"init_from": "runs/smoke-cpu-copy-long"},
        "sft-cpu": {"global_batch_size": 5, "max_steps": 360, "decay_steps": 120,
                    "eval_every": 360, "checkpoint_every": 120, "init_from": "runs/warmup-cpu-long"},
    }  # fmt: skip
    # the long ones in float32, as their figures were measured (configs/hardware/cpu.yaml)
    float32 = {"name": "cpu", "dtype": "float32"}
    rows = {"sft-cpu": {"micro_batch_size": 5}}  # the long one's 5 rows a step
    for short_name, changed in twins.items():
        short, long = _run(short_name).config, _run(f"{short_name}-long").config
        assert {k: getattr(long.train, k) for k in changed} == changed, short_name
        keep = set(changed)
        assert long.train.model_dump(exclude=keep) == short.train.model_dump(exclude=keep)
        assert (short.hardware.name, short.hardware.dtype) == ("cpu-bf16", "bfloat16")
        hardware = {**float32, **rows.get(short_name, {})}
        assert {k: getattr(long.hardware, k) for k in hardware} == hardware, short_name
        assert long.hardware.model_dump(exclude=set(hardware)) == short.hardware.model_dump(
            exclude=set(hardware)
        )
        for section in ("model", "data"):
            assert getattr(long, section) == getattr(short, section), (short_name, section)
    # CI's script: the base's records of before, in place of rows; the warm-up's longer keys
    base = _run("smoke-cpu-copy").config.train
    assert base.copy_records_joins == ["="] and not base.copy_records_beside
    assert base.max_steps == 350 and base.aba_rows_share == 0
    long_keys = ["=", " de ", " del ", " en ", " de la "]
    assert _run("warmup-cpu").config.train.copy_records_joins == long_keys
    sft = _run("sft-cpu").config
    steps = (sft.train.global_batch_size, sft.train.max_steps, sft.train.decay_steps)
    assert steps == (4, 300, 290) and sft.hardware.micro_batch_size == 4  # one micro-batch a step


def test_byte_chat_vocabulary_agrees_with_the_tokenizer() -> None:
    from enlace_config.schema.run import BYTE_CHAT_VOCAB_SIZE

    assert ByteTokenizer.vocab_size == BYTE_CHAT_VOCAB_SIZE


def test_check_runs_cli_never_imports_torch() -> None:
    # In the workspace environment torch is installed, so this is the real promise.
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "enlace_config.cli",
            "check",
            *map(str, RUN_FILES),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "enlace_config.compose" in imported  # the import trace is real
    assert not {m for m in imported if m.split(".")[0] == "torch"}
