"""COMPANION_DATABASE_URL and COMPANION_KEY_DIR: checked without the PostgreSQL driver, the URL never shown."""

from __future__ import annotations

import os

import pytest

from bot.settings import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for key in list(os.environ):
        if key.startswith("COMPANION_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_the_sqlite_file_is_the_default_and_the_key_folder_has_one() -> None:
    settings = load_settings()
    assert settings.database_url is None and str(settings.key_dir) == "data/keys"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://companion:s3cret@db.example.com:5432/companion",
        "postgres://companion@/companion?host=/run/postgresql",
    ],
)
def test_a_postgresql_url_is_accepted_as_it_is(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("COMPANION_DATABASE_URL", f" {url} ")
    settings = load_settings()
    assert settings.database_url is not None and settings.database_url.get_secret_value() == url
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://companion:s3cret@db.example.com/companion",
        "companion:s3cret@db.example.com",
        "postgresql://companion:s3cret@db.example.com:99999/companion",
        "postgresql://companion:s3cret@db.example.com/com panion",
    ],
)
def test_a_bad_database_url_names_the_variable_and_never_shows_the_value(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("COMPANION_DATABASE_URL", url)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("COMPANION_DATABASE_URL: must be a PostgreSQL URL")
    assert "s3cret" not in str(info.value)


def test_checking_the_url_loads_no_driver() -> None:
    import subprocess
    import sys

    code = (
        "import os, sys; os.environ['COMPANION_DATABASE_URL'] = 'postgresql://u:p@h/d';"
        "from bot.settings import load_settings; load_settings();"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool', 'cryptography')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=os.getcwd())
    assert done.stdout.strip() == "[]"


def test_a_shared_database_is_off_by_default_and_needs_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().shared_database is False
    monkeypatch.setenv("COMPANION_SHARED_DATABASE", "true")
    with pytest.raises(ConfigError) as info:
        load_settings()  # on the SQLite file: one line, nothing else
    assert str(info.value) == (
        "COMPANION_SHARED_DATABASE: needs COMPANION_DATABASE_URL=postgresql://... (several processes cannot share "
        "an SQLite file)"
    )
    monkeypatch.setenv("COMPANION_DATABASE_URL", "postgresql://companion:s3cret@db.example.com/companion")
    assert load_settings().shared_database is True
