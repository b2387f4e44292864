"""A chat platform sees the core through core.ports and core.values only, so importing one loads a few
core modules, not the core (the contract `platforms-see-ports-and-values` in pyproject.toml says which
imports; this says what they cost). Each import runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PLATFORMS = ["adapters.telegram", "adapters.discord", "adapters.terminal", "adapters.web.chat"]
COUNT = (
    "import json, sys, importlib; importlib.import_module(sys.argv[1]); "
    "print(json.dumps(sorted(m for m in sys.modules if m == 'core' or m.startswith('core.'))))"
)


def core_modules_loaded_by(module: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", COUNT, module], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_importing_one_platform_loads_at_most_fifteen_core_modules(platform):
    loaded = core_modules_loaded_by(platform)
    assert len(loaded) <= 15, loaded
    # Only the ports and the values: nothing of the turn, the commands, delivery, memory or privacy.
    assert all(
        m in ("core", "core.ports", "core.values") or m.startswith(("core.ports.", "core.values.")) for m in loaded
    ), loaded
