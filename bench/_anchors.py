"""Where a mutation goes: its original text searched in the source tree, within a def or a file name, never a path."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Protocol

# The code a mutation may plant a bug in. bench/ is searched because some of its tools have tests of
# their own (the wire tap); tests/ and docs/ quote code, so an original found there would be a false twin.
SEARCHED = ("core", "adapters", "bot", "migrations", "bench")
SUFFIXES = (".py", ".sql", ".js", ".css")
# The list holds every original text itself.
NOT_SEARCHED = frozenset({"bench/mutate.py", "bench/mutations.py"})


class Anchored(Protocol):
    """What the resolver reads of a mutation (bench.mutations.Mutation)."""

    @property
    def name(self) -> str: ...
    @property
    def original(self) -> str: ...
    @property
    def replacement(self) -> str: ...
    @property
    def within(self) -> str | None: ...


class ListOutOfDate(Exception):
    """A mutation's original text is not found exactly once where it says: the list must follow the code."""


@dataclasses.dataclass(frozen=True, slots=True)
class Place:
    """The one occurrence of a mutation's original text."""

    path: str  # relative to the tree's root, with forward slashes
    start: int  # offset of the original in the file's text
    line: int  # 1-based line of that offset, for people


@dataclasses.dataclass(frozen=True, slots=True)
class _Def:
    path: str
    start: int  # offset of its first line (decorators included)
    end: int  # offset just past its last line
    line: int


def searched(path: str) -> bool:
    return path.split("/", 1)[0] in SEARCHED and path.endswith(SUFFIXES) and path not in NOT_SEARCHED


def tree_files(root: Path) -> list[str]:
    """The files of the tree: tracked, and untracked but not ignored (new code not committed yet); each
    once (during a merge, a conflicted file is listed once per stage)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return list(dict.fromkeys(name for name in listed.split("\0") if name and (root / name).is_file()))


class SourceTree:
    """The searched files of one tree, read and parsed at most once each."""

    def __init__(self, root: Path, files: Iterable[str]) -> None:
        self.root = root
        self.files = sorted(f for f in files if searched(f))
        self._texts: dict[str, str] = {}
        self._defs: dict[str, list[_Def]] | None = None

    @classmethod
    def of(cls, root: Path) -> SourceTree:
        """The tree at `root`: git's files, or every file when it is no checkout (a mutant's copy holds just those)."""
        try:
            files = tree_files(root)
        except (OSError, subprocess.CalledProcessError):
            files = [p.relative_to(root).as_posix() for d in SEARCHED for p in (root / d).rglob("*") if p.is_file()]
        return cls(root, files)

    def text(self, path: str) -> str:
        if path not in self._texts:
            self._texts[path] = (self.root / path).read_text(encoding="utf-8")
        return self._texts[path]

    def defs(self) -> dict[str, list[_Def]]:
        """Every class and function by qualified name (`Class.method`, `outer.inner`), over all Python files."""
        if self._defs is None:
            self._defs = {}
            for path in self.files:
                if path.endswith(".py"):
                    _collect(path, self.text(path), self._defs)
        return self._defs

    def locate(self, mutation: Anchored) -> Place:
        """The one place of the original; raises ListOutOfDate saying why there is not exactly one."""
        name, within = mutation.name, mutation.within
        if within is None:
            spans = [(path, 0, None) for path in self.files]
            where = "in the tree"
        elif within.endswith(SUFFIXES):  # a file name: the migrations, which never move
            paths = [p for p in self.files if PurePosixPath(p).name == within]
            if len(paths) != 1:
                found = f"{len(paths)} files by that name ({', '.join(paths)})" if paths else "no file by that name"
                raise ListOutOfDate(f"{name}: within {within!r} not found: {found}")
            spans = [(paths[0], 0, None)]
            where = f"in {within}"
        else:
            defs = self.defs().get(within, [])
            if len(defs) != 1:
                if not defs:
                    raise ListOutOfDate(
                        f"{name}: within {within!r} not found: no def by that qualified name (renamed?)"
                    )
                places = ", ".join(f"{d.path}:{d.line}" for d in defs)
                raise ListOutOfDate(f"{name}: within {within!r} not found once: {len(defs)} defs ({places})")
            d = defs[0]
            spans = [(d.path, d.start, d.end)]
            where = f"in {within} ({d.path})"
        hits = [
            (path, start)
            for path, begin, end in spans
            for start in _occurrences(self.text(path), mutation.original, begin, end)
        ]
        if not hits:
            raise ListOutOfDate(f"{name}: the original text is not found {where}")
        places = [self._place(path, start) for path, start in hits]
        if len(places) > 1:
            listed = ", ".join(f"{p.path}:{p.line}" for p in places)
            raise ListOutOfDate(f"{name}: the original text is found {len(places)} times {where} ({listed}), not once")
        return places[0]

    def mutated(self, mutation: Anchored) -> tuple[Place, str]:
        """The place and the whole text of its file with the replacement planted there."""
        place = self.locate(mutation)
        text = self.text(place.path)
        end = place.start + len(mutation.original)
        return place, text[: place.start] + mutation.replacement + text[end:]

    def _place(self, path: str, start: int) -> Place:
        return Place(path, start, self.text(path).count("\n", 0, start) + 1)


def _occurrences(text: str, original: str, begin: int, end: int | None) -> list[int]:
    """Every start of `original` wholly inside text[begin:end], overlapping ones included."""
    found = []
    start = text.find(original, begin, end)
    while start != -1:
        found.append(start)
        start = text.find(original, start + 1, end)
    return found


def _collect(path: str, text: str, defs: dict[str, list[_Def]]) -> None:
    # ast counts lines by "\n" (str.splitlines would split at form feeds too); a last line without one ends the text.
    line_starts = [0, *(m.end() for m in re.finditer("\n", text)), len(text)]

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualified = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                last = child.end_lineno or child.lineno
                defs.setdefault(qualified, []).append(_Def(path, line_starts[first - 1], line_starts[last], first))
                visit(child, qualified + ".")
            else:
                visit(child, prefix)  # defs inside if/try/with blocks keep their enclosing name

    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise ListOutOfDate(f"{path} does not parse, so no def in it can be found: {exc}") from exc
    visit(tree, "")
