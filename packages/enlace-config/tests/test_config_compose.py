"""Composition, overrides, defaults, origins, and every class of config error, with key and source."""

from collections.abc import Callable
from pathlib import Path

import pytest

from enlace_config import ConfigError, ResolvedConfig, load_config, load_run_config

WriteTree = Callable[..., Path]  # the conftest fixture
BASE_INCLUDES = (
    "include:\n"
    "  hardware: hardware/cpu.yaml\n"
    "  model: model/tiny.yaml\n"
    "  train: train/short.yaml\n"
    "  data: data/bytes.yaml\n"
)


def load(
    root: Path, run: str = "runs/base.yaml", overrides: list[str] | None = None
) -> ResolvedConfig:
    return load_run_config(root / run, overrides or [])


def error_of(root: Path, run: str = "runs/base.yaml", overrides: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(root, run, overrides)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def problem_line(message: str, *needles: str) -> str:
    """The one problem line of `message` holding every needle (fails when there is none)."""
    lines = [line for line in message.splitlines() if all(n in line for n in needles)]
    assert lines, f"no problem line with {needles} in:\n{message}"
    return lines[0]


# ---------------------------------------------------------------------------------- composition


def test_base_tree_composes_with_defaults(write_tree: WriteTree) -> None:
    resolved = load(write_tree())
    cfg = resolved.config
    assert cfg.run.name == "base" and cfg.run.out_dir == "runs/base"
    assert cfg.model.d_model == 32 and cfg.hardware.micro_batch_size == 4
    assert cfg.train.lr == 3e-4 and isinstance(cfg.train.lr, float)  # `lr: 3e-4` in a file
    assert str(resolved.origins["train.lr"]) == "configs/train/short.yaml:4"
    assert str(resolved.origins["run.name"]) == "default (the run file's name)"
    assert str(resolved.origins["run.out_dir"]) == "default (runs/<run.name>)"
    assert str(resolved.origins["train.seed"]) == "default (schema default)"


def test_order_layers_then_run_file_then_overrides(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "runs/base.yaml": (
                "include:\n"
                "  hardware: hardware/cpu.yaml\n"
                "  model: model/tiny.yaml\n"
                "  train: train/short.yaml\n"
                "  data: data/bytes.yaml\n"
                "train:\n"
                "  max_steps: 20\n"
                "  seed: 7\n"
                "run:\n"
                "  name: mine\n"
            )
        }
    )
    resolved = load(
        root, overrides=["train.seed=99", "model.n_layers=4", "hardware.dtype=bfloat16"]
    )
    cfg, origins = resolved.config, resolved.origins
    assert (
        cfg.train.max_steps == 20 and str(origins["train.max_steps"]) == "configs/runs/base.yaml:7"
    )
    assert cfg.train.seed == 99 and "train.seed=99" in str(origins["train.seed"])
    assert cfg.train.global_batch_size == 8  # deep merge kept the layer's other keys
    assert str(origins["train.global_batch_size"]) == "configs/train/short.yaml:2"
    assert cfg.model.n_layers == 4 and cfg.hardware.dtype == "bfloat16"
    assert cfg.run.name == "mine" and cfg.run.out_dir == "runs/mine"  # out_dir follows the name


def test_nested_include_in_same_slot(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "model/wide.yaml": "include: model/tiny.yaml\nd_model: 64\n",
            "model/wider.yaml": "include:\n  model: model/wide.yaml\nffn_hidden: 256\n",
            "runs/base.yaml": (
                "include:\n  hardware: hardware/cpu.yaml\n  model: model/wider.yaml\n"
                "  train: train/short.yaml\n  data: data/bytes.yaml\n"
            ),
        }
    )
    resolved = load(root)
    m = resolved.config.model
    assert (m.d_model, m.ffn_hidden, m.n_layers) == (64, 256, 2)
    assert str(resolved.origins["model.d_model"]) == "configs/model/wide.yaml:2"
    assert str(resolved.origins["model.ffn_hidden"]) == "configs/model/wider.yaml:3"
    assert str(resolved.origins["model.n_layers"]) == "configs/model/tiny.yaml:4"


def test_sections_can_be_written_in_the_run_file(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "runs/inline.yaml": (
                "include:\n  hardware: hardware/cpu.yaml\n  model: model/tiny.yaml\n"
                "  train: train/short.yaml\n"
                "data:\n  kind: bytes\n  path: elsewhere\n  context_length: 32\n"
            )
        }
    )
    resolved = load(root, "runs/inline.yaml")
    assert resolved.config.data.path == "elsewhere"
    assert resolved.config.run.name == "inline"


def test_run_file_outside_configs_reads_includes_from_cwd_configs(
    write_tree: WriteTree, tmp_path: Path
) -> None:
    write_tree()
    elsewhere = tmp_path / "experiments" / "exp1.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text((tmp_path / "configs/runs/base.yaml").read_text())
    assert load_run_config(elsewhere).config.run.name == "exp1"


def test_to_yaml_reads_back_the_same(write_tree: WriteTree, tmp_path: Path) -> None:
    resolved = load(
        write_tree(), overrides=["run.name=no", "train.lr=3e-4", "data.path=2024-01-01"]
    )
    text = resolved.to_yaml()
    assert "with overrides: run.name=no train.lr=3e-4" in text
    saved = tmp_path / "resolved.yaml"
    saved.write_text(text)
    again = load_run_config(saved)
    assert again.to_dict() == resolved.to_dict()
    assert again.config.run.name == "no" and again.config.data.path == "2024-01-01"
    with_origins = resolved.to_yaml(with_origins=True)
    assert "lr: 0.0003  # command line override `train.lr=3e-4`" in with_origins
    assert "d_model: 32  # configs/model/tiny.yaml:3" in with_origins
    assert resolved.origins_as_text()["model.d_model"] == "configs/model/tiny.yaml:3"


# ---------------------------------------------------------------------------------- overrides


def test_override_values_are_yaml_1_2_scalars(write_tree: WriteTree) -> None:
    resolved = load(
        write_tree(),
        overrides=[
            "train.lr=3e-4",
            "run.name=no",
            "hardware.compile=true",
            "train.init_from=null",
            "hardware.peak_flops=1.5e12",
            "data.path=on",
        ],
    )
    cfg = resolved.config
    assert cfg.train.lr == 3e-4 and isinstance(cfg.train.lr, float)
    assert cfg.run.name == "no" and cfg.run.out_dir == "runs/no"
    assert cfg.hardware.compile is True and cfg.train.init_from is None
    assert cfg.hardware.peak_flops == 1.5e12 and cfg.data.path == "on"


def test_numbers_given_to_text_fields_keep_their_text(write_tree: WriteTree) -> None:
    root = write_tree({"data/bytes.yaml": "kind: bytes\npath: 007\ncontext_length: 64\n"})
    resolved = load(root, overrides=["run.name=2060", "train.init_from=1e3"])
    cfg = resolved.config
    assert cfg.run.name == "2060" and cfg.run.out_dir == "runs/2060"
    assert cfg.train.init_from == "1e3"
    assert cfg.data.path == "007"


def test_override_without_equals(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["train.lr"])
    line = problem_line(msg, "command line override `train.lr`")
    assert "key=value" in line


def test_override_unknown_key_suggests(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["model.n_layer=4", "trian.lr=1", "train.lr.x=1"])
    assert "did you mean 'n_layers'" in problem_line(msg, "model.n_layer:", "`model.n_layer=4`")
    assert "did you mean 'train'" in problem_line(msg, "trian.lr:", "`trian.lr=1`")
    assert "not a section" in problem_line(msg, "train.lr.x:", "`train.lr.x=1`")


def test_override_bad_value_and_bad_key_path(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["train.lr=abc", "model..d=1", "train.max_steps=[1"])
    line = problem_line(msg, "train.lr:", "command line override `train.lr=abc`")
    assert "'abc'" in line and "number" in line
    assert "not a dotted key path" in problem_line(msg, "`model..d=1`")
    assert "cannot read the value" in problem_line(msg, "`train.max_steps=[1`")


# ---------------------------------------------------------------------------------- bad files


def test_missing_run_file(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), "runs/nope.yaml")
    assert "file not found: configs/runs/nope.yaml" in msg


def test_missing_layer_names_the_include_line_and_suggests(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "runs/base.yaml": (
                "include:\n  hardware: hardware/cpu.yaml\n  model: model/tin.yaml\n"
                "  train: train/short.yaml\n  data: data/bytes.yaml\n"
            )
        }
    )
    msg = error_of(root)
    line = problem_line(msg, "configs/runs/base.yaml:3", "include.model:")
    assert (
        "file not found: configs/model/tin.yaml" in line and "did you mean model/tiny.yaml" in line
    )
    assert msg.count("\n  - ") == 1  # no cascade of "model: missing" problems


def test_yaml_syntax_error_in_a_layer(write_tree: WriteTree) -> None:
    msg = error_of(write_tree({"train/short.yaml": "max_steps: 10\nlr: [3e-4\n"}))
    line = problem_line(msg, "configs/train/short.yaml:", "YAML syntax error")
    assert "column" in line


def test_duplicate_key_in_a_layer(write_tree: WriteTree) -> None:
    root = write_tree(
        {"train/short.yaml": "max_steps: 10\nglobal_batch_size: 8\nlr: 3e-4\nlr: 1e-3\n"}
    )
    msg = error_of(root)
    line = problem_line(msg, "configs/train/short.yaml:4", "lr:")
    assert "duplicate key" in line and "line 3" in line


@pytest.mark.parametrize(
    ("text", "needle"),
    [("", "is empty"), ("# nothing\n", "is empty"), ("- 1\n- 2\n", "must be a mapping")],
)
def test_empty_or_non_mapping_layer(write_tree: WriteTree, text: str, needle: str) -> None:
    msg = error_of(write_tree({"data/bytes.yaml": text}))
    line = problem_line(msg, "include.data:", needle)
    assert "configs/data/bytes.yaml" in line


def test_empty_run_file(write_tree: WriteTree) -> None:
    msg = error_of(write_tree({"runs/empty.yaml": "\n"}), "runs/empty.yaml")
    assert "configs/runs/empty.yaml is empty" in msg


def test_include_cycle(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "model/a.yaml": "include: model/b.yaml\nd_model: 64\n",
            "model/b.yaml": "include: model/a.yaml\nd_model: 32\n",
            "runs/base.yaml": (
                "include:\n  hardware: hardware/cpu.yaml\n  model: model/a.yaml\n"
                "  train: train/short.yaml\n  data: data/bytes.yaml\n"
            ),
        }
    )
    msg = error_of(root)
    line = problem_line(msg, "include cycle")
    assert "configs/model/a.yaml -> configs/model/b.yaml -> configs/model/a.yaml" in line
    assert "configs/model/b.yaml:1" in line  # the include line that closes the cycle


def test_self_include_is_a_cycle(write_tree: WriteTree) -> None:
    root = write_tree({"model/tiny.yaml": "include: model/tiny.yaml\nd_model: 32\n"})
    assert "include cycle" in error_of(root)


def test_layer_in_wrong_slot(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "runs/base.yaml": (
                "include:\n  hardware: model/tiny.yaml\n  model: model/tiny.yaml\n"
                "  train: train/short.yaml\n  data: data/bytes.yaml\n"
            )
        }
    )
    line = problem_line(error_of(root), "configs/runs/base.yaml:2", "include.hardware:")
    assert "wrong slot" in line and "model layer" in line


def test_nested_include_of_another_slot(write_tree: WriteTree) -> None:
    root = write_tree({"model/tiny.yaml": "include: train/short.yaml\nd_model: 32\n"})
    line = problem_line(error_of(root), "configs/model/tiny.yaml:1", "include:")
    assert "wrong slot" in line and "train layer" in line


def test_run_file_included_as_layer(write_tree: WriteTree) -> None:
    root = write_tree({"model/tiny.yaml": "include: runs/base.yaml\n"})
    assert "run file cannot be included" in error_of(root)


def test_unknown_slot_and_bad_include_shapes(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "runs/base.yaml": (
                "include:\n  hardwar: hardware/cpu.yaml\n  model: 3\n"
                "  train: train/short.yaml\n  data: data/bytes.yaml\n"
            ),
            "runs/list.yaml": "include: [hardware/cpu.yaml]\n",
        }
    )
    msg = error_of(root)
    assert "did you mean 'hardware'" in problem_line(
        msg, "configs/runs/base.yaml:2", "include.hardwar:"
    )
    assert "got 3" in problem_line(msg, "configs/runs/base.yaml:3", "include.model:")
    assert "hardware: missing" in msg  # the slot really is missing: said once
    msg = error_of(root, "runs/list.yaml")
    assert "maps slots to layer files" in problem_line(msg, "configs/runs/list.yaml:1", "include:")


# ---------------------------------------------------------------------------------- validation


def test_every_problem_at_once_with_key_value_expectation_and_source(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "hardware/cpu.yaml": "device: gpu\ndtype: float32\nmicro_batch_size: 4\n",
            "model/tiny.yaml": (
                "vocab_size: 256\ncontext_length: 64\nd_model: 32\nn_layer: 2\n"
                "n_heads: 4\nn_kv_heads: 2\nffn_hidden: 64\n"
            ),
        }
    )
    msg = error_of(root, overrides=["train.lr=abc", "train.max_steps=-3"])
    assert msg.startswith("5 problems in configs/runs/base.yaml (with 2 overrides):")
    line = problem_line(msg, "configs/hardware/cpu.yaml:1", "hardware.device:")
    assert "'gpu'" in line and "'cpu' or 'cuda'" in line
    line = problem_line(msg, "configs/model/tiny.yaml:4", "model.n_layer:")
    assert "unknown key" in line and "did you mean 'n_layers'" in line
    line = problem_line(msg, "configs/model/tiny.yaml", "model.n_layers:")
    assert "missing" in line and "Number of transformer blocks" in line
    line = problem_line(msg, "command line override `train.lr=abc`", "train.lr:")
    assert "'abc'" in line and "expected a valid number" in line
    line = problem_line(msg, "`train.max_steps=-3`", "train.max_steps:")
    assert "-3" in line and "greater than 0" in line


def test_wrong_types_anywhere(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "data/bytes.yaml": "kind: bytes\npath: [a]\ncontext_length: 64.5\n",
            "runs/base.yaml": (
                "include:\n  hardware: hardware/cpu.yaml\n  model: model/tiny.yaml\n"
                "  train: train/short.yaml\n  data: data/bytes.yaml\n"
                "hardware: 3\nrun:\n  name: [x]\n"
            ),
        }
    )
    msg = error_of(root)
    assert "a valid string" in problem_line(msg, "configs/data/bytes.yaml:2", "data.path:")
    assert "integer" in problem_line(msg, "configs/data/bytes.yaml:3", "data.context_length:")
    assert "got 3" in problem_line(msg, "configs/runs/base.yaml:6", "hardware:")
    assert "string" in problem_line(msg, "configs/runs/base.yaml:8", "run.name:")


def test_unknown_section_in_run_file(write_tree: WriteTree) -> None:
    root = write_tree({"runs/base.yaml": BASE_INCLUDES + "trian:\n  lr: 1\n"})
    line = problem_line(error_of(root), "configs/runs/base.yaml:6", "trian:")
    assert "did you mean 'train'" in line


def test_missing_section_says_how_to_add_it(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "runs/base.yaml": "include:\n  hardware: hardware/cpu.yaml\n  model: model/tiny.yaml\n  train: train/short.yaml\n"
        }
    )
    line = problem_line(error_of(root), "data:", "missing")
    assert "include:" in line and "data/<file>.yaml" in line


def test_bad_run_name(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["run.name=my run"])
    line = problem_line(msg, "run.name:", "`run.name=my run`")
    assert "letters, digits" in line
    root = write_tree({"runs/bad name.yaml": "include:\n  hardware: hardware/cpu.yaml\n"})
    msg = error_of(root, "runs/bad name.yaml")
    assert "letters, digits" in problem_line(msg, "run.name:", "default (the run file's name)")


CROSS_FIELD_CASES = [
    # (files, overrides, key, source, words)
    ({}, ["model.n_heads=5"], "model.n_heads", "`model.n_heads=5`", ["do not divide d_model 32"]),
    (
        {},
        ["model.n_heads=32", "model.n_kv_heads=1"],
        "model.n_heads",
        "`model.n_heads=32`",
        ["odd", "RoPE"],
    ),
    (
        {},
        ["model.n_kv_heads=3"],
        "model.n_kv_heads",
        "`model.n_kv_heads=3`",
        ["do not divide n_heads 4"],
    ),
    ({}, ["model.vocab_size=200"], "model.vocab_size", "`model.vocab_size=200`", ["bytes", "256"]),
    (
        {},
        ["model.conv_layers=[0,7]"],
        "model.conv_layers",
        "`model.conv_layers=[0,7]`",
        ["distinct layer indices from 0 to n_layers - 1"],
    ),
    (
        {},
        ["model.conv_layers=[0]", "model.qk_norm=false"],
        "model.conv_layers",
        "`model.conv_layers=[0]`",
        ["LFM2", "model.qk_norm: true"],
    ),
    (
        {"data/bytes.yaml": "kind: shards\npath: data/x\ncontext_length: 64\n"},
        ["model.vocab_size=70000"],
        "model.vocab_size",
        "`model.vocab_size=70000`",
        ["uint16", "65536"],
    ),
    (
        {"data/bytes.yaml": "kind: chat\npath: data/x\ncontext_length: 64\n"},
        ["model.vocab_size=256"],
        "model.vocab_size",
        "`model.vocab_size=256`",
        ["chat tokens", "263"],
    ),
    (
        {},
        ["hardware.micro_batch_size=3"],
        "train.global_batch_size",
        "configs/train/short.yaml:2",
        ["micro-batches of 3"],
    ),
    (
        {},
        ["train.decay_steps=9"],
        "train.decay_steps",
        "`train.decay_steps=9`",
        ["exceeds max_steps 10"],
    ),
    ({}, ["train.min_lr=1e-3"], "train.min_lr", "`train.min_lr=1e-3`", ["above lr"]),
    ({}, ["train.lr=0"], "train.lr", "`train.lr=0`", ["greater than 0"]),
    ({}, ["train.lr=3"], "train.lr", "`train.lr=3`", ["less than or equal to 1"]),
    (
        {},
        ["hardware.dtype=float16"],
        "hardware.loss_scaling",
        "configs/hardware/cpu.yaml",
        ["GradScaler"],
    ),
    (
        {},
        ["data.context_length=128"],
        "data.context_length",
        "`data.context_length=128`",
        ["longer than", "64"],
    ),
    (
        {"data/bytes.yaml": "kind: shards\npath: data/x\ncontext_length: 64\nfallback: builtin\n"},
        [],
        "data.fallback",
        "configs/data/bytes.yaml:4",
        ["no fallback"],
    ),
    (
        {},
        ["train.init_optimizer=true"],
        "train.init_optimizer",
        "`train.init_optimizer=true`",
        ["init_from"],
    ),
    ({}, ["train.seed=-1"], "train.seed", "`train.seed=-1`", ["greater than or equal to 0"]),
    (
        {},
        ["hardware.peak_flops=.inf"],
        "hardware.peak_flops",
        "`hardware.peak_flops=.inf`",
        ["finite"],
    ),
]


@pytest.mark.parametrize(("files", "overrides", "key", "source", "words"), CROSS_FIELD_CASES)
def test_cross_field_and_range_checks(
    write_tree: WriteTree,
    files: dict[str, str],
    overrides: list[str],
    key: str,
    source: str,
    words: list[str],
) -> None:
    msg = error_of(write_tree(files), overrides=overrides)
    line = problem_line(msg, f"{key}:", source)
    for word in words:
        assert word in line, line


def test_cross_field_problem_names_every_involved_source(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["hardware.micro_batch_size=3"])
    line = problem_line(msg, "train.global_batch_size:")
    assert (
        "hardware.micro_batch_size from command line override `hardware.micro_batch_size=3`" in line
    )


def test_several_cross_field_problems_in_one_section(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["model.n_heads=5", "model.n_kv_heads=3"])
    problem_line(msg, "model.n_heads:", "do not divide d_model")
    problem_line(msg, "model.n_kv_heads:", "do not divide n_heads 5")


# ---------------------------------------------------------------------------------- other kinds


def test_copy_records_go_into_byte_token_and_chat_rows(write_tree: WriteTree) -> None:
    """Copy records mix into pretraining rows of bytes and of token shards, and into chat rows,
    where they keep the copying head through the fine-tuning (issue 35)."""
    shards = {"data/bytes.yaml": "kind: shards\npath: data/x\ncontext_length: 64\n"}
    chat = {"data/bytes.yaml": "kind: chat\npath: data/x\ncontext_length: 64\n"}
    for files, vocab in (({}, []), (shards, []), (chat, ["model.vocab_size=264"])):
        overrides = ["train.copy_records_share=0.5", *vocab]
        cfg = load(write_tree(files), overrides=overrides).config
        assert cfg.train.copy_records_share == 0.5
    # Lower case, capitals and digits by default (74 symbols); beyond the alphabet is refused.
    assert load(write_tree()).config.train.copy_records_letters == 74
    msg = error_of(write_tree(), overrides=["train.copy_records_letters=75"])
    problem_line(msg, "train.copy_records_letters:", "74")


def test_copy_records_beside_the_rows_need_a_share(write_tree: WriteTree) -> None:
    """train.copy_records_beside adds the records' rows to the data's: without a share there is
    nothing to add, and the config fails at start-up naming both keys; with one it loads."""
    msg = error_of(write_tree(), overrides=["train.copy_records_beside=true"])
    problem_line(msg, "train.copy_records_beside:", "copy_records_share is 0")
    beside = ["train.copy_records_beside=true", "train.copy_records_share=0.5"]
    assert load(write_tree(), overrides=beside).config.train.copy_records_beside


def test_aba_rows_need_a_step_before_the_end_and_rows_of_text(write_tree: WriteTree) -> None:
    """train.aba_rows_*: from a step at or after max_steps no row would be trained, and chat rows
    are conversations, not text to repeat: both fail at start-up naming the key; bytes and token
    shards take them."""
    late = ["train.aba_rows_share=1.0", f"train.aba_rows_from={10**6}"]
    problem_line(error_of(write_tree(), overrides=late), "train.aba_rows_from:", "max_steps")
    chat = {"data/bytes.yaml": "kind: chat\npath: data/x\ncontext_length: 64\n"}
    aba = ["train.aba_rows_share=0.5", "model.vocab_size=264"]
    msg = error_of(write_tree(chat), overrides=aba)
    problem_line(msg, "train.aba_rows_share:", "data.kind bytes or shards")
    shards = {"data/bytes.yaml": "kind: shards\npath: data/x\ncontext_length: 64\n"}
    assert load(write_tree(shards), overrides=aba).config.train.aba_rows_share == 0.5
    assert load(write_tree(), overrides=["train.aba_rows_share=1"]).config.train.aba_rows_from == 0


def test_recall_records_are_refused_for_token_rows(write_tree: WriteTree) -> None:
    """Recall records are bytes: with token shards or chat on a tokenizer the config fails at
    start-up, naming the key and the data it does not fit; bytes and byte chat take them."""
    recall = ["train.copy_records_share=0.5", "train.copy_records_source=letters+recall"]
    shards = {"data/bytes.yaml": "kind: shards\npath: data/x\ncontext_length: 64\n"}
    msg = error_of(write_tree(shards), overrides=recall)
    problem_line(msg, "train.copy_records_source:", "recall records are bytes")
    assert "data.kind shards" in msg
    chat = {"data/bytes.yaml": "kind: chat\npath: data/x\ncontext_length: 64\n"}
    cfg = load(write_tree(chat), overrides=[*recall, "model.vocab_size=264"]).config
    assert cfg.train.copy_records_source == "letters+recall"
    assert load(write_tree(), overrides=recall).config.train.copy_records_share == 0.5


def test_layer_file_validates_as_complete_section(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "model/partial.yaml": "d_model: 64\n",
            "model/ok.yaml": "include: model/tiny.yaml\nd_model: 64\n",
        }
    )
    loaded = load_config(root / "model/ok.yaml", ["n_layers=3"])
    assert (
        loaded.kind == "model"
        and loaded.to_dict()["n_layers"] == 3
        and loaded.to_dict()["d_model"] == 64
    )
    with pytest.raises(ConfigError) as info:
        load_config(root / "model/partial.yaml")
    assert "n_heads: missing" in str(info.value)


def test_mapping_override_merges_and_empty_section_changes_nothing(write_tree: WriteTree) -> None:
    root = write_tree({"runs/base.yaml": BASE_INCLUDES + "train:\n  # max_steps: 5\n"})
    resolved = load(root, overrides=["hardware={compile: true, micro_batch_size: 2}"])
    cfg = resolved.config
    assert cfg.train.max_steps == 10  # the empty `train:` kept the layer
    assert cfg.hardware.compile is True and cfg.hardware.micro_batch_size == 2
    assert cfg.hardware.dtype == "float32"  # merged, not replaced
    assert "hardware={compile" in str(resolved.origins["hardware.compile"])
    assert str(resolved.origins["hardware.dtype"]) == "configs/hardware/cpu.yaml:2"


def test_overrides_apply_in_order(write_tree: WriteTree) -> None:
    resolved = load(write_tree(), overrides=["train.init_from=a", "train.init_from=b"])
    assert resolved.config.train.init_from == "b"  # overrides apply in order


def test_configs_root_falls_back_to_the_run_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No folder named configs above the file and none in the working directory.
    work = tmp_path / "work"
    (work / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    (work / "model" / "m.yaml").write_text(
        "vocab_size: 256\ncontext_length: 64\nd_model: 32\nn_layers: 2\nn_heads: 4\n"
        "n_kv_heads: 2\nffn_hidden: 64\n"
    )
    (work / "exp.yaml").write_text(
        "include:\n  model: model/m.yaml\n"
        "hardware: {device: cpu, micro_batch_size: 2}\n"
        "train: {max_steps: 4, global_batch_size: 2, lr: 1e-3}\n"
        "data: {kind: bytes, path: d, context_length: 64}\n"
    )
    resolved = load_run_config(work / "exp.yaml")
    assert resolved.config.model.d_model == 32
    assert str(resolved.origins["model.d_model"]) == "work/model/m.yaml:3"
    assert resolved.config.run.name == "exp"


def test_cross_section_problem_reported_alongside_a_bad_section(write_tree: WriteTree) -> None:
    # pydantic alone would skip RunConfig's checks because the model section is invalid.
    msg = error_of(
        write_tree(),
        overrides=["model.n_heads=5", "hardware.micro_batch_size=3", "data.context_length=999"],
    )
    problem_line(msg, "model.n_heads:", "do not divide d_model")
    problem_line(msg, "train.global_batch_size:", "micro-batches of 3")
    # data.context_length vs the model: the model section is invalid, so that rule cannot run
    assert "data.context_length" not in msg
    assert msg.startswith("3 problems")  # n_heads, n_kv_heads (2 does not divide 5), batch


def test_problems_come_in_reading_order(write_tree: WriteTree) -> None:
    root = write_tree(
        {
            "train/short.yaml": (
                "max_steps: 10\nglobal_batch_size: 8\nwarmup_steps: 2\nlr: 3e-4\ndecay_steps: 2\n"
                "log_every: x\nseed: y\nbeta1: 2\n"
            )
        }
    )
    msg = error_of(root, overrides=["model.d_model=z", "train.max_steps=q"])
    lines = [line for line in msg.splitlines() if line.startswith("  - ")]
    for line, where in zip(lines, ("short.yaml:6", "short.yaml:7", "short.yaml:8"), strict=False):
        assert where in line, msg
    assert all("command line override" in line for line in lines[3:]) and len(lines) == 5


def test_pattern_and_length_messages_read_as_expectations(write_tree: WriteTree) -> None:
    msg = error_of(write_tree(), overrides=["data.path=''"])
    assert "expected at least 1 character" in problem_line(msg, "data.path:")


def test_the_global_batch_is_kept_at_any_world_size(write_tree: WriteTree) -> None:
    # One rule, in the schema: the run file check (world size 1) and the trainer (any world size).
    config = load_run_config(write_tree() / "runs/base.yaml", ["train.global_batch_size=32"]).config
    assert [config.grad_accumulation_steps(n) for n in (1, 2, 8)] == [8, 4, 1]
    with pytest.raises(ConfigError) as info:
        config.grad_accumulation_steps(3)
    message = str(info.value)
    assert (
        "the run at world size 3" in message and "train.global_batch_size: 32 sequences" in message
    )
    assert "world sizes that fit: [1, 2, 4, 8]" in message


def test_recall_joins_are_refused_where_they_would_break_the_records(
    write_tree: WriteTree,
) -> None:
    """copy_records_joins: «=» by default (the records of before); a list of joins is taken as
    written, spaces kept; none at all, an empty join, a long one, or one holding the records'
    own «|» or «,» fails at start-up naming the key and the file."""
    assert load(write_tree()).config.train.copy_records_joins == ["="]
    run = BASE_INCLUDES + "train:\n  copy_records_joins: "
    joins = {"runs/base.yaml": run + '["=", " de la "]\n'}
    assert load(write_tree(joins)).config.train.copy_records_joins == ["=", " de la "]
    for bad in ("[]", '[""]', '["a|b"]', '[", "]', '["=", " muy largo "]'):
        msg = error_of(write_tree({"runs/base.yaml": run + bad + "\n"}))
        problem_line(msg, "configs/runs/base.yaml:7", "train.copy_records_joins")


def test_copied_weight_is_refused_without_conversations(write_tree: WriteTree) -> None:
    """data.copied_weight weighs the copies of a conversation's words: on bytes the config fails
    at start-up naming the key and the kind; below 1 (the copies weighing less) is refused; chat
    takes it."""
    msg = error_of(write_tree(), overrides=["data.copied_weight=3"])
    problem_line(msg, "data.copied_weight:", "kind bytes has no conversations")
    chat = {"data/bytes.yaml": "kind: chat\npath: data/x\ncontext_length: 64\n"}
    msg = error_of(write_tree(chat), overrides=["data.copied_weight=0.5", "model.vocab_size=264"])
    problem_line(msg, "data.copied_weight:", "1")
    weighed = ["data.copied_weight=3", "model.vocab_size=264"]
    assert load(write_tree(chat), overrides=weighed).config.data.copied_weight == 3.0
