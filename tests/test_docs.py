"""The docs name what exists: every path, test, link and heading they point to, every setting and command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "PRIVACY.md", *(ROOT / "docs").glob("*.md")])

# A backticked word is a repository path when it starts with one of these folders or is one of these files.
PATH_PREFIXES = ("core/", "adapters/", "bot/", "tests/", "bench/", "migrations/", "docs/", ".ci/")
TOP_FILES = {"pyproject.toml", "Dockerfile", "README.md", "PRIVACY.md", ".dockerignore", ".gitignore"}
# Written by a run, never committed (.gitignore): named as where output goes, not as a file to read.
GENERATED = ("bench/results/",)

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# Inline code may wrap onto the next line of its paragraph, never across a blank line.
_TICKED = re.compile(r"`((?:[^`\n]|\n(?!\s*\n))+)`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def _prose(doc: Path) -> str:
    """The text outside fenced code blocks (those hold commands and examples, not references)."""
    return _FENCE.sub("", doc.read_text(encoding="utf-8"))


def _repo_path(token: str) -> str | None:
    """The file part of a backticked token that names a repository path (`a/b.py::test_x`,
    `a/b.py:function` -> `a/b.py`), or None when the token is something else."""
    if any(c.isspace() for c in token):
        return None
    path = token.split(":", 1)[0]
    if path in TOP_FILES or path.startswith(PATH_PREFIXES):
        return path
    return None


def _named_tests(doc: Path) -> list[tuple[str, str]]:
    """(test file, test name) for each `tests/...py::name`, and each `::name` that follows a
    test file on the same line (a table cell lists several tests of one file that way)."""
    named = []
    text = _prose(doc)
    current: str | None = None
    end = 0
    for match in _TICKED.finditer(text):
        if "\n" in text[end : match.start()]:
            current = None  # a new line (a new table row): its `::name`s follow its own file
        end = match.end()
        token = match.group(1)
        if token.startswith("::"):
            named.append((current or "(no test file before it on its line)", token[2:]))
            continue
        path = _repo_path(token)
        if path is not None and path.startswith("tests/") and path.endswith(".py"):
            current = path
            if "::" in token:
                named.append((path, token.split("::", 1)[1]))
    return named


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    return {_slug(h) for h in _HEADING.findall(_prose(doc))}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_the_docs_name_exists(doc: Path) -> None:
    named = {_repo_path(t) for t in _TICKED.findall(_prose(doc))} - {None}
    missing = sorted(p for p in named if p is not None and not p.startswith(GENERATED) and not (ROOT / p).exists())
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_test_the_docs_name_exists(doc: Path) -> None:
    missing = []
    for path, name in _named_tests(doc):
        file = ROOT / path
        if not file.is_file() or not re.search(rf"^\s*(async\s+)?def {re.escape(name)}\(", file.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, f"{doc.name} names tests that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_link_of_the_docs_lands_on_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(doc)):
        if re.match(r"^[a-z]+:", target):  # https:, mailto: outside the repository
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        lands = file.exists() and not (anchor and file.suffix == ".md" and anchor not in _anchors(file))
        if not lands:
            broken.append(target)
    assert not broken, f"{doc.name} links to what does not exist: {broken}"


def test_the_readme_settings_table_names_every_setting() -> None:
    from bot.settings import Settings

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [
        f"COMPANION_{name.upper()}" for name in Settings.model_fields if f"`COMPANION_{name.upper()}`" not in readme
    ]
    assert not missing, f"README.md's settings table lacks {missing}"


def test_the_readme_names_every_chat_command() -> None:
    from core.commands.registry import COMMANDS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [f"/{c.name}" for c in COMMANDS if not re.search(rf"`/{c.name}\b", readme)]
    assert not missing, f"README.md's command table lacks {missing}"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"^```sh\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert first_block is not None, "README.md opens without its two commands"
    commands = first_block.group(1).strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert len(commands) == 2 and commands[1] == ci


def test_the_module_map_names_every_module() -> None:
    """docs/architecture.md's map goes stale the day a module is added without a word there."""
    text = _prose(ROOT / "docs" / "architecture.md")
    mentioned = {Path(t.split(":", 1)[0]).name for t in _TICKED.findall(text)}
    modules = [
        p.relative_to(ROOT)
        for top in ("core", "adapters", "bot")
        for p in sorted((ROOT / top).rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
    ]
    missing = [str(p) for p in modules if p.name not in mentioned]
    assert not missing, f"docs/architecture.md's module map lacks {missing}"
