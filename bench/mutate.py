"""Mutation testing of our own: named one-line bugs planted in a copy of the tree, the suite run for each.

python bench/mutate.py --list                      # the mutations, by name and category
python bench/mutate.py --check                     # every original text is found exactly once (no run)
python bench/mutate.py --jobs 2                    # all of them on the fast layers (tests/core tests/adapters)
python bench/mutate.py --only recall-pad-predicate --suite tests
python bench/mutate.py --jobs 2 -- --deselect tests/x.py::test_flaky   # anything after -- goes to pytest

The list is bench/mutations.py. Each mutation replaces one exact text (usually one line),
found by that text in the source tree, not by a path (bench/_anchors.py): exactly once in the
tree, or once within the def or migration its entry names, so moving a file edits nothing here
and a renamed anchor is named by --check. For each, the tracked and untracked-but-not-ignored
files are copied to a temporary folder, the replacement is planted at the place found, and
pytest runs there with PYTHONPATH set to the copy, without -x: the number of failing tests per
mutation is the point. A mutation is killed when at least one test fails, errors or the run
times out. A clean copy runs first (the baseline); tests failing there are not counted against
any mutation.

Exit status: 0 when every privacy-guard mutation is killed, 1 when one survives, 2 when the
list no longer matches the code or the baseline cannot run. Standard library only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/mutate.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._anchors import ListOutOfDate, Place, SourceTree, tree_files
from bench.mutations import MUTATIONS, PRIVACY, Mutation

ROOT = Path(__file__).resolve().parent.parent
FAST_LAYERS = ("tests/core", "tests/adapters")


# --- running --------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    mutation: Mutation | None  # None: the baseline
    place: Place | None  # where the mutation was planted
    failing: set[str]
    status: str  # "ran", "timeout", "broken" (pytest did not report)
    seconds: float
    detail: str = ""

    def failing_beyond(self, baseline: set[str]) -> set[str]:
        return self.failing - baseline

    def killed(self, baseline: set[str]) -> bool:
        return self.status != "ran" or bool(self.failing_beyond(baseline))


def copy_tree(root: Path, files: list[str], dest: Path) -> None:
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)


def suite_for(mutation: Mutation | None, suite: list[str]) -> list[str]:
    paths = list(suite)
    for extra in mutation.also if mutation else ():
        if not any(extra == s or extra.startswith(s.rstrip("/") + "/") for s in suite):
            paths.append(extra)
    return paths


def run_one(
    mutation: Mutation | None,
    planted: tuple[Place, str] | None,
    suite: list[str],
    snapshot: Path,
    files: list[str],
    timeout: float,
    extra: list[str],
) -> Outcome:
    """Run the suite on a copy of the snapshot with `planted` (the place and its file's mutated text) written in."""
    started = time.monotonic()
    place = planted[0] if planted else None
    with tempfile.TemporaryDirectory(prefix="companion-mutant-") as folder:
        copy = Path(folder) / "tree"
        copy_tree(snapshot, files, copy)
        if planted is not None:
            (copy / planted[0].path).write_text(planted[1], encoding="utf-8")
        junit = Path(folder) / "junit.xml"
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPANION_")}
        env["PYTHONPATH"] = str(copy)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            *suite_for(mutation, suite),
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={junit}",
            # Its own temporary folder: pytest's shared default keeps only the three newest sessions'
            # folders and deletes older ones, so parallel runs would delete each other's files.
            f"--basetemp={Path(folder) / 'tmp'}",
            *extra,
        ]
        # Its own session, so a stop of this script ends the whole pytest run (and its children).
        process = subprocess.Popen(
            argv, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        _RUNNING.add(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            return Outcome(mutation, place, set(), "timeout", time.monotonic() - started, f"over {timeout:.0f} s")
        finally:
            _RUNNING.discard(process)
        seconds = time.monotonic() - started
        if not junit.exists():
            tail = output.strip().splitlines()[-3:]
            return Outcome(mutation, place, set(), "broken", seconds, " / ".join(tail))
        return Outcome(mutation, place, failing_tests(junit), "ran", seconds)


_RUNNING: set[subprocess.Popen[str]] = set()


def _stop(process: subprocess.Popen[str]) -> None:
    """End a pytest run and everything it started (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds like Ctrl-C: runs stopped, temporary copies removed


def failing_tests(junit: Path) -> set[str]:
    """Test ids with a failure or an error (collection errors included) in a junit file."""
    failing = set()
    for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314 - our own pytest's output
        if case.find("failure") is not None or case.find("error") is not None:
            failing.add(f"{case.get('classname', '')}::{case.get('name', '')}")
    return failing


# --- reporting ------------------------------------------------------------------------------


def report(outcomes: list[Outcome], baseline: set[str], suite: list[str]) -> int:
    rows = [("mutation", "category", "killed", "failing tests", "seconds")]
    for outcome in outcomes:
        m = outcome.mutation
        assert m is not None
        count = len(outcome.failing_beyond(baseline))
        killed = {"timeout": "yes (timeout)", "broken": "yes (no report)"}.get(outcome.status, "yes" if count else "NO")
        rows.append((m.name, m.category, killed, str(count), f"{outcome.seconds:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(rows[0], widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")

    def rate(selected: list[Outcome]) -> str:
        killed = sum(o.killed(baseline) for o in selected)
        share = f"{100 * killed / len(selected):.0f}%" if selected else "n/a"
        return f"{killed}/{len(selected)} ({share})"

    privacy = [o for o in outcomes if o.mutation and o.mutation.category == PRIVACY]
    print()
    print(f"suite: {' '.join(suite)}; {datetime.date.today().isoformat()}")
    print(f"kill rate: {rate(outcomes)}")
    print(f"privacy-guard kill rate: {rate(privacy)}")
    for category in sorted({o.mutation.category for o in outcomes if o.mutation} - {PRIVACY}):
        print(f"{category} kill rate: {rate([o for o in outcomes if o.mutation and o.mutation.category == category])}")
    thin = [o for o in privacy if o.status == "ran" and len(o.failing_beyond(baseline)) == 1]
    survivors = [o for o in outcomes if not o.killed(baseline)]
    if thin:
        print("privacy-guard mutations killed by one test only:")
        for o in thin:
            print(f"  {o.mutation.name}: {next(iter(o.failing_beyond(baseline)))}")
    if survivors:
        print("survivors: " + ", ".join(o.mutation.name for o in survivors))
    for o in outcomes:
        if o.detail:
            print(f"  {o.mutation.name}: {o.status}: {o.detail}")
    return 1 if any(o.mutation.category == PRIVACY for o in survivors) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--check", action="store_true", help="check every original text occurs once, and exit")
    parser.add_argument("--only", action="append", default=[], help="a mutation name (repeat, or comma-separated)")
    parser.add_argument("--suite", nargs="+", default=list(FAST_LAYERS), help="test paths (default: the fast layers)")
    parser.add_argument("--jobs", type=int, default=1, help="mutated copies run in parallel")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per run; a run over it counts killed")
    parser.add_argument(
        "--json", default=str(ROOT / "bench" / "results" / "mutate.json"), help="where to write every outcome"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the clean run (assume it is green)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]

    wanted = {name.strip() for item in args.only for name in item.split(",") if name.strip()}
    unknown = wanted - {m.name for m in MUTATIONS}
    if unknown:
        print(f"unknown mutation: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    selected = [m for m in MUTATIONS if not wanted or m.name in wanted]
    if args.list or args.check:
        return list_or_check(selected, SourceTree.of(ROOT), listing=args.list)
    signal.signal(signal.SIGTERM, _on_sigterm)

    # One snapshot of the tree at the start: edits to the checkout while this runs change nothing.
    # The mutations are found in the snapshot, the tree that is run.
    with tempfile.TemporaryDirectory(prefix="companion-snapshot-") as folder:
        snapshot = Path(folder)
        files = tree_files(ROOT)
        copy_tree(ROOT, files, snapshot)
        tree = SourceTree(snapshot, files)
        try:
            planted = {m.name: tree.mutated(m) for m in selected}
        except ListOutOfDate as exc:
            print(f"mutation list out of date: {exc} (python bench/mutate.py --check lists every one)", file=sys.stderr)
            return 2
        try:
            return run_all(selected, planted, args, extra, snapshot, files)
        except KeyboardInterrupt:
            for process in list(_RUNNING):
                _stop(process)
            print("stopped", file=sys.stderr)
            return 130


def list_or_check(selected: list[Mutation], tree: SourceTree, *, listing: bool) -> int:
    """Find every selected mutation once: --list prints each with where it was found, --check the failures.

    Exit 2 unless every one is found exactly once; a path hint that disagrees is noted, never an error."""
    failures: list[str] = []
    for m in selected:
        try:
            place = tree.locate(m)
        except ListOutOfDate as exc:
            failures.append(str(exc))
            if listing:
                print(f"{m.name:55} {m.category:14} NOT FOUND ONCE")
            continue
        if listing:
            print(f"{m.name:55} {m.category:14} {place.path}:{place.line}")
        if m.path is not None and m.path != place.path:
            print(f"note: {m.name}: its path hint {m.path} is not used; found in {place.path}", file=sys.stderr)
    for failure in failures:
        print(f"mutation list out of date: {failure}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} of {len(selected)} mutations not found exactly once", file=sys.stderr)
        return 2
    print(f"{len(selected)} mutations" + ("" if listing else ", every original text found exactly once"))
    return 0


def run_all(
    selected: list[Mutation],
    planted: dict[str, tuple[Place, str]],
    args: argparse.Namespace,
    extra: list[str],
    snapshot: Path,
    files: list[str],
) -> int:
    baseline: set[str] = set()
    if not args.no_baseline:
        print(f"baseline: {' '.join(args.suite)} on a clean copy ...", flush=True)
        clean = run_one(None, None, args.suite, snapshot, files, args.timeout, extra)
        if clean.status != "ran":
            print(f"the clean copy did not run ({clean.status}: {clean.detail})", file=sys.stderr)
            return 2
        baseline = clean.failing
        print(f"baseline: {len(baseline)} failing, {clean.seconds:.0f} s", flush=True)
        for test in sorted(baseline):
            print(f"  failing without any mutation (not counted): {test}")

    outcomes: list[Outcome] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        futures = {
            pool.submit(run_one, m, planted[m.name], args.suite, snapshot, files, args.timeout, extra): m
            for m in selected
        }
        for future in concurrent.futures.as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            count = len(outcome.failing_beyond(baseline))
            verdict = "killed" if outcome.killed(baseline) else "SURVIVED"
            print(
                f"[{len(outcomes)}/{len(selected)}] {futures[future].name}: {verdict} "
                f"({outcome.status}, {count} failing, {outcome.seconds:.0f} s)",
                flush=True,
            )
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    order = {m.name: i for i, m in enumerate(selected)}
    outcomes.sort(key=lambda o: order[o.mutation.name])
    if args.json:
        write_json(Path(args.json), outcomes, baseline, args.suite)
    return report(outcomes, baseline, args.suite)


def write_json(path: Path, outcomes: list[Outcome], baseline: set[str], suite: list[str]) -> None:
    """Every outcome with the tests that failed, for reading which test guards what."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "name": o.mutation.name,
            "category": o.mutation.category,
            "path": o.place.path if o.place else None,  # where it was found and planted
            "status": o.status,
            "killed": o.killed(baseline),
            "failing": sorted(o.failing_beyond(baseline)),
            "seconds": round(o.seconds, 1),
        }
        for o in outcomes
        if o.mutation is not None
    ]
    body = {"date": datetime.date.today().isoformat(), "suite": suite, "baseline_failing": sorted(baseline)}
    path.write_text(json.dumps({**body, "mutations": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
