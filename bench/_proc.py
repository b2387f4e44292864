"""Child processes for the benchmarks: peak RSS and wall time of one run, the installed entry
point, and the `-X importtime` report."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_IMPORT_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( *)(\S+)\s*$")

_GNU_TIME = Path("/usr/bin/time")
# Without /usr/bin/time: a small wrapper that spawns the child and reports its wall time and peak RSS.
_WRAPPER = (
    "import os, sys, time\n"
    "t0 = time.perf_counter()\n"
    "pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "wall = time.perf_counter() - t0\n"
    "open(sys.argv[1], 'w').write(f'{wall} {usage.ru_maxrss}')\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_child(argv: list[str], stdin: bytes, env: dict[str, str], cwd: Path) -> dict:
    """Run one child and return its wall time and its own peak RSS.

    The child is started by a small wrapper (GNU time, else a tiny Python spawner), never forked
    from this process: a child's ru_maxrss also counts the memory of the process it was forked
    from before its exec, and the bench process is large after the assembly measurement."""
    with tempfile.TemporaryDirectory(prefix="bench-child-") as scratch:
        report = Path(scratch) / "rusage"
        if _GNU_TIME.is_file():
            command = [str(_GNU_TIME), "-f", "%M", "-o", str(report), *argv]
        else:
            command = [sys.executable, "-c", _WRAPPER, str(report), *argv]
        with (
            open(Path(scratch) / "in", "w+b") as fin,
            open(Path(scratch) / "out", "w+b") as fout,
            open(Path(scratch) / "err", "w+b") as ferr,
        ):
            fin.write(stdin)
            fin.seek(0)
            started = time.perf_counter()
            proc = subprocess.run(command, stdin=fin, stdout=fout, stderr=ferr, env=env, cwd=cwd, timeout=120)
            wall = time.perf_counter() - started
            fout.seek(0)
            ferr.seek(0)
            stdout, stderr = fout.read(), ferr.read()
        fields = report.read_text().strip().splitlines()[-1].split()  # GNU time may add a status line first
        if len(fields) == 2:
            wall, rss_kib = float(fields[0]), int(fields[1])
        else:
            rss_kib = int(fields[0])
    return {
        "wall_s": wall,
        "rss_mib": rss_kib / 1024,  # ru_maxrss is KiB on Linux
        "rc": proc.returncode,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
    }


def console_script() -> str | None:
    """The installed `companion` entry point itself (not a version manager's shim in front of it)."""
    beside = Path(sys.executable).parent / "companion"
    if beside.is_file():
        return str(beside)
    return shutil.which("companion")


def parse_importtime(stderr: str) -> list[tuple[str, int, int]]:
    """(module, cumulative microseconds, nesting depth) of each `-X importtime` line."""
    entries = []
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            _self_us, cumulative_us, indent, name = match.groups()
            entries.append((name, int(cumulative_us), len(indent) // 2))
    return entries


def import_report(stderr: str, forbidden: tuple[str, ...]) -> dict:
    entries = parse_importtime(stderr)
    top = sorted(entries, key=lambda e: e[1], reverse=True)[:10]  # any depth: nested ones name the cost
    names = {name for name, _, _ in entries}
    return {
        "modules_imported": len(names),
        "top10_cumulative_ms": [{"module": n, "ms": round(us / 1e3, 1), "depth": d} for n, us, d in top],
        "forbidden_imported": sorted(n for n in names if n.split(".")[0] in forbidden),
        "packages": sorted({n.split(".")[0] for n in names}),
    }
