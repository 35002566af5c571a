"""A key pasted where a config names it is never echoed by a config error (issue 26): fields that
name a secret (`api_key_env`, `token_env`) never quote their value, and anything shaped like a key
is hidden wherever a message would show it (a value, a key, an override). Values that are not
secrets are still quoted, so the message stays useful. Also `schema_default`, which the resume
check of enlace-train asks."""

from pathlib import Path

import pytest

from enlace_config import ConfigError, load_config
from enlace_config.schema.agent import AssistantConfig
from enlace_config.schema.run import RunConfig
from enlace_config.schema_keys import schema_default

BRAVE_LIKE = "BSAkR3xQ9vLmN2pT7wY4zH8jF1cD6gE"  # Brave Search API keys look like this
HEX_TOKEN = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def error_of(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides or [], schema=AssistantConfig)
    return str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        f"api_key_env: {BRAVE_LIKE}\n",  # the Brave key where its variable's name goes
        f"api_key_env: '{HEX_TOKEN}'\n",  # a lower-case token: hidden by the field's name
        f"api_key_env: x-{HEX_TOKEN[:12]}\n",  # short and odd: still a secret's field
        f"web:\n  people:\n    - name: Ana\n      token_env: {BRAVE_LIKE}\n",
        f"max_tokens: {BRAVE_LIKE}\n",  # a key in any field, shaped like a key
        f"{BRAVE_LIKE}: 1\n",  # a key pasted on a line of its own, as a key
        f"model: enlace\n{BRAVE_LIKE}\n",  # ... or where YAML cannot read it at all
        f"search_config: [{HEX_TOKEN}]\n",
    ],
)
def test_a_pasted_key_never_appears_in_the_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "assistant.yaml"
    path.write_text(text)
    message = error_of(path)
    assert BRAVE_LIKE not in message and HEX_TOKEN not in message, message
    assert HEX_TOKEN[:12] not in message, message
    assert "assistant.yaml" in message  # still says where


def test_the_secrets_field_says_what_is_wrong_without_the_value(tmp_path: Path) -> None:
    path = tmp_path / "assistant.yaml"
    path.write_text(f"api_key_env: {BRAVE_LIKE}\n")
    message = error_of(path)
    assert "assistant.yaml:1: api_key_env:" in message
    assert f"a value of {len(BRAVE_LIKE)} characters, not shown" in message
    assert "looks like a key itself, not the name of an environment variable" in message
    path.write_text("api_key_env: my-key\n")  # not shaped like a key: the pattern says why
    message = error_of(path)
    assert "a value of 6 characters, not shown" in message and "my-key" not in message
    assert "expected text matching the pattern" in message


def test_an_override_that_sets_a_secret_field_is_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "assistant.yaml"
    path.write_text("model: enlace\n")
    for override in (f"api_key_env={BRAVE_LIKE}", f"api_key_env={HEX_TOKEN}"):
        message = error_of(path, [override])
        assert BRAVE_LIKE not in message and HEX_TOKEN not in message, message
        assert "api_key_env" in message


def test_values_that_are_no_secret_are_still_quoted(tmp_path: Path) -> None:
    path = tmp_path / "assistant.yaml"
    path.write_text("max_tokens: lots\nbase_url: ftp://SomeHost2024.example/v1\nstream: maybe\n")
    message = error_of(path)
    assert "got 'lots'" in message and "got 'maybe'" in message
    assert "ftp://SomeHost2024.example/v1" in message


def test_schema_default_reads_a_dotted_key() -> None:
    assert schema_default(RunConfig, "train.grad_clip") == 1.0
    assert schema_default(RunConfig, "hardware.openmp_spin_count") == 0
    assert schema_default(RunConfig, "data.eval_text_files") == []
    assert schema_default(AssistantConfig, "web.people") == []
    for missing in ("train.max_steps", "train.no_such_key", "nothing.at_all"):
        with pytest.raises(KeyError):
            schema_default(RunConfig, missing)
