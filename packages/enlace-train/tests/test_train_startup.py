"""Start-up failures: each ends with exit code 2 and a message naming the problem, in the order that
fails fastest (config before torch is imported, then the hardware, then data and model)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from enlace_train.cli import main


def test_invalid_config_exits_2_before_torch_is_imported(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {name: x, out_dir: x}\ntrain: {lr: -1}\n")
    code = textwrap.dedent(f"""
        import sys
        from enlace_train.cli import main
        rc = main([{str(bad)!r}])
        print("torch imported:", "torch" in sys.modules)
        sys.exit(rc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "torch imported: False" in proc.stdout
    assert "train.lr" in proc.stderr and "Traceback" not in proc.stderr


def test_entry_point_exit_code_and_debug_traceback(tmp_path):
    missing = tmp_path / "missing.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "enlace_train", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "missing.yaml" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "enlace_train", str(missing), "--debug"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_profile_on_this_cpu_only_machine_exits_2(write_run, capsys):
    path = write_run(
        "cuda",
        hardware={
            "name": "turing-2060",
            "device": "cuda",
            "dtype": "float16",
            "loss_scaling": True,
            "attention": "mem_efficient",
        },
    )
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "turing-2060" in err and "hardware.device=cuda" in err and "cpu.yaml" in err
    assert not (path.parent / "runs" / "cuda" / "metrics.jsonl").exists()  # nothing started


def test_missing_data_exits_2_naming_the_path(write_run, capsys):
    path = write_run("nodata", data={"path": "/nonexistent/smoke", "fallback": "none"})
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/smoke" in err and "enlace-data smoke" in err


def test_resume_refusal_exits_2_through_the_cli(write_run, capsys):
    path = write_run("refuse", train={"max_steps": 2, "decay_steps": 1, "warmup_steps": 0})
    assert main([str(path)]) == 0
    assert main([str(path), "hardware.micro_batch_size=1"]) == 2
    err = capsys.readouterr().err
    assert "hardware.micro_batch_size: 2 -> 1" in err


def test_cpu_runs_set_the_profiles_openmp_spin_count_unless_exported(write_run, monkeypatch):
    path = write_run(
        "omp",
        data={"path": "/nonexistent/smoke", "fallback": "none"},
        hardware={"openmp_spin_count": 1234},
    )
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    assert main([str(path)]) == 2  # fails at the data, after the environment is prepared
    assert os.environ["GOMP_SPINCOUNT"] == "1234"
    monkeypatch.setenv("GOMP_SPINCOUNT", "7")  # the user's own value wins
    assert main([str(path)]) == 2
    assert os.environ["GOMP_SPINCOUNT"] == "7"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # so does an exported wait policy
    assert main([str(path)]) == 2
    assert "GOMP_SPINCOUNT" not in os.environ


def test_progress_line_rewrites_in_a_terminal_and_stays_silent_otherwise():
    import io

    from enlace_train.metrics import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        progress = Progress(stream)
        progress.update("[run] step 1/10 (10%)")
        progress.update("[run] step 2/10")
        progress.clear()
    assert tty.getvalue().startswith("\r[run] step 1/10 (10%)\r[run] step 2/10")
    assert pipe.getvalue() == ""


def _shards(root, tokens, *, vocab_size=256, tokenizer_id="sp-test"):
    from enlace_data.shards import shard_name, write_shard

    for split in ("train", "val"):
        write_shard(
            root / shard_name(split, 0),
            tokens,
            vocab_size=vocab_size,
            tokenizer_id=tokenizer_id,
            text_bytes=4 * len(tokens),
        )


def test_token_id_outside_the_vocabulary_exits_2_naming_the_shard(write_run, tmp_path, capsys):
    import numpy as np

    root = tmp_path / "shards"
    _shards(root, np.arange(2000) % 256)
    with open(root / "val_000000.shard", "r+b") as f:  # behind the header's CRC
        f.seek(256 + 2 * 500)
        f.write((300).to_bytes(2, "little"))
    path = write_run("badid", data={"kind": "shards", "path": str(root), "fallback": "none"})
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "val_000000.shard" in err and "token id 300" in err and "256" in err
    assert "--debug" not in err  # not the internal-error path


def test_tokenizer_of_another_corpus_beside_the_shards_exits_2(write_run, tmp_path, capsys):
    import numpy as np
    from enlace_data.sample import builtin_split
    from enlace_data.tokenizer import train_tokenizer

    words = builtin_split("val").decode("utf-8").split()
    other = train_tokenizer([" ".join(words[:4000])], vocab_size=400)
    root = tmp_path / "shards"
    _shards(root, np.arange(2000) % 256, tokenizer_id="sp-the-real-one")
    other.save(root)
    path = write_run("othertok", data={"kind": "shards", "path": str(root), "fallback": "none"})
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "sp-the-real-one" in err and other.tokenizer_id in err and "tokenizer.model" in err


@pytest.mark.parametrize(
    ("verb", "option"),
    [("eval", "--json"), ("eval-chat", "--json"), ("eval-chat", "--misses"), ("lm-eval", "--json")],
)
def test_output_files_are_checked_before_the_evaluation(verb, option, tmp_path, capsys):
    # The positionals need not exist: the output file is refused while parsing, before any of
    # the evaluation's work (whose result it was to hold) begins.
    positionals = {"eval": ["runs/x", "book.txt"], "eval-chat": ["runs/x", "data"]}
    args = [verb, *positionals.get(verb, ["runs/x"]), option]
    for target, why in ((tmp_path / "nowhere" / "r.json", "does not exist"), (tmp_path, "folder")):
        with pytest.raises(SystemExit) as exit_:
            main([*args, str(target)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert why in err and str(target) in err and "Traceback" not in err
