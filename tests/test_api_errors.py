"""The Python API's entry points that take user data raise their documented error type, with a message that
names the input: never a bare KeyError, AttributeError or UnicodeDecodeError."""

from __future__ import annotations

from pathlib import Path

import pytest

from sotopia_env.episodes.export import import_jsonl
from sotopia_env.episodes.sotopia_public import read_sotopia
from sotopia_env.episodes.store import StoreURLError, open_store
from sotopia_env.errors import UserError
from sotopia_env.library import LibraryError, load_library

BAD_FILES = {
    "garbage.bin": bytes(range(256)) * 4,
    "list.yaml": b"- 1\n- 2\n",
    "rows.jsonl": b'{"id": 1}\n',
    "array.jsonl": b"[1, 2]\n",
    "not_json.jsonl": b"not json\n",
}


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    for name, data in BAD_FILES.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "bad_entry").mkdir()
    (tmp_path / "bad_entry" / "x.yaml").write_text("scenarios: [{id: 1}]\n")
    return tmp_path


@pytest.mark.parametrize("name", ["missing", "garbage.bin", "list.yaml", "bad_entry"])
def test_load_library_on_broken_input(inputs: Path, name: str) -> None:
    with pytest.raises(LibraryError) as raised:
        load_library([inputs / name])
    assert str(inputs / name) in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("importer", [import_jsonl, read_sotopia])
@pytest.mark.parametrize("name", ["missing.jsonl", "garbage.bin", "rows.jsonl", "array.jsonl", "not_json.jsonl"])
def test_importers_on_bad_rows(inputs: Path, name: str, importer) -> None:
    with pytest.raises(UserError) as raised:
        importer(inputs / name)
    assert isinstance(raised.value, ValueError)
    assert str(inputs / name) in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("url", ["mongodb://x", "redis:/host:6379/0", "rediss:/h", "x", "", " a.db", 5, None])
def test_open_store_on_bad_urls_creates_nothing(tmp_path: Path, monkeypatch, url) -> None:
    monkeypatch.chdir(tmp_path)
    if url is None:  # the default store comes from $SOTOPIA_ENV_STORE: checked the same way
        monkeypatch.setenv("SOTOPIA_ENV_STORE", "postgres://user:secret@host/db")
    with pytest.raises(StoreURLError) as raised:
        open_store(url)
    message = str(raised.value)
    assert "sqlite:///" in message and "redis://" in message and "secret" not in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "kind"),
    [("sqlite:///tmp/x.db", "sqlite"), ("sqlite:////abs/x", "sqlite"), ("runs/x.db", "sqlite"), ("x.sqlite", "sqlite"),
     ("redis://127.0.0.1:6379/0", "redis"), ("rediss://:pw@host:6380/1", "redis"), ("unix:///tmp/redis.sock", "redis")],
)  # fmt: skip
def test_store_urls_we_accept(url: str, kind: str) -> None:
    from sotopia_env.episodes.store import store_kind

    assert store_kind(url) == kind


def test_a_configs_store_key_is_checked_when_the_config_is_read() -> None:
    from sotopia_env.training.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"cfg.yaml: field 'store': 'mongodb://x': unknown store scheme"):
        parse_config({"base_model": "smollm2-135m", "output_dir": "out", "store": "mongodb://x"}, "cfg.yaml")
