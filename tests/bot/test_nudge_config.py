"""Every COMPANION_ default of the nudge manners reaches the core's configuration (issue 14)."""

from __future__ import annotations

import pytest

from bot.bootstrap import companion_config
from bot.settings import ConfigError, load_settings
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    import os

    for key in list(os.environ):
        if key.startswith("COMPANION_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_the_defaults_are_the_documented_manners():
    proactive = companion_config(load_settings()).proactive
    assert proactive == ProactiveConfig(
        Manners(timezone="UTC", quiet_hours="22:00-08:00", budget=2, cooldown=4 * 3600, active_within=30 * 60),
        watch_after=3600,
        goal_every=3 * 86400,
        checkin_after=3 * 86400,
    )
    assert proactive.manners.backoff_after == 2


def test_each_nudge_setting_reaches_the_triage(monkeypatch):
    for name, value in {
        "NUDGES_PER_DAY": "5",
        "NUDGE_COOLDOWN_MINUTES": "90",
        "NUDGE_ACTIVE_MINUTES": "10",
        "NUDGE_BACKOFF_AFTER": "4",
        "NUDGE_WATCH_AFTER_MINUTES": "120",
        "NUDGE_GOAL_EVERY_HOURS": "24",
        "NUDGE_CHECKIN_AFTER_HOURS": "48",
        "QUIET_HOURS": "23:00-07:00",
        "TIMEZONE": "Europe/Berlin",
    }.items():
        monkeypatch.setenv(f"COMPANION_{name}", value)
    proactive = companion_config(load_settings()).proactive
    assert proactive == ProactiveConfig(
        Manners(
            timezone="Europe/Berlin",
            quiet_hours="23:00-07:00",
            budget=5,
            cooldown=90 * 60,
            active_within=10 * 60,
            backoff_after=4,
        ),
        watch_after=120 * 60,
        goal_every=24 * 3600,
        checkin_after=48 * 3600,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NUDGE_BACKOFF_AFTER", "0"),
        ("NUDGE_ACTIVE_MINUTES", "-1"),
        ("NUDGE_GOAL_EVERY_HOURS", "0"),
        ("NUDGE_CHECKIN_AFTER_HOURS", "lots"),
    ],
)
def test_a_bad_nudge_setting_names_its_variable(monkeypatch, name, value):
    monkeypatch.setenv(f"COMPANION_{name}", value)
    with pytest.raises(ConfigError, match=f"^COMPANION_{name}: "):
        load_settings()


def test_the_stop_grace_and_the_burst_window_reach_the_core(monkeypatch):
    monkeypatch.setenv("COMPANION_STOP_GRACE", "7")
    monkeypatch.setenv("COMPANION_BURST_SECONDS", "0.5")
    config = companion_config(load_settings())
    assert (config.stop_grace, config.burst_seconds) == (7.0, 0.5)


def test_the_stop_grace_is_under_kubernetes_default_by_default(monkeypatch):
    monkeypatch.delenv("COMPANION_STOP_GRACE", raising=False)
    assert companion_config(load_settings()).stop_grace == 25.0
