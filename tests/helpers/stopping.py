"""A child process killed (SIGKILL) right after a named step of a module: the crash tests of storage code."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.proc import ROOT

# Wraps `stage` of `module` so that the child prints the stage's name after it and sleeps until killed;
# the test's own script follows, with its arguments from sys.argv[3:].
_PRELUDE = """
import importlib, sys, time
module, stage = importlib.import_module(sys.argv[1]), sys.argv[2]
original = getattr(module, stage)
def stopping(*args, **kwargs):
    result = original(*args, **kwargs)
    print(stage, flush=True)
    time.sleep(600)  # the test SIGKILLs it here
    return result
setattr(module, stage, stopping)
"""


def kill_after(module: str, stage: str, script: str, *args: str) -> None:
    """Run `script` in a child process with `module.stage` wrapped, and SIGKILL it right after that step."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", _PRELUDE + script, module, stage, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            marker = proc.stdout.readline().strip() if proc.stdout else ""
            assert marker == stage, f"never reached {stage}: {'' if marker else proc.stderr and proc.stderr.read()}"
        finally:
            proc.kill()  # SIGKILL: no finally, no atexit, no cleanup in the child
            proc.wait()
