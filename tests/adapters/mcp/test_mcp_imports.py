"""What adapters/mcp/ loads: the configuration file without the SDK, the hub with the SDK's client half only."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.proc import ROOT

SERVER_SIDE = {"starlette", "uvicorn", "sse_starlette", "python_multipart", "pydantic_settings"}


def loaded_by(*modules: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after importing `modules`."""
    script = f"import sys, {', '.join(modules)}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    return set(done.stdout.split())


def test_reading_the_configuration_file_imports_no_part_of_the_sdk() -> None:
    assert "mcp" not in loaded_by("adapters.mcp.config")


def test_the_hub_loads_the_sdks_client_without_its_servers() -> None:
    loaded = loaded_by("adapters.mcp.hub", "adapters.mcp.probe")
    assert "mcp" in loaded
    assert not loaded & SERVER_SIDE
