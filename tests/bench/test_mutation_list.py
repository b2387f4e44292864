"""The mutation list follows the code: each entry finds its one place by its text, wherever its file moves."""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import pytest

from bench import mutate
from bench._anchors import SUFFIXES, ListOutOfDate, SourceTree
from bench.mutations import MUTATIONS, PRIVACY, M, Mutation


@pytest.fixture(scope="module")
def tree() -> SourceTree:
    return SourceTree.of(mutate.ROOT)


def _write(root: Path, files: dict[str, str]) -> SourceTree:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return SourceTree(root, files)


def _copy(tree: SourceTree, dest: Path, moves: dict[str, str]) -> SourceTree:
    """A copy of the tree's searched files, some of them under other names."""
    names = []
    for name in tree.files:
        target = dest / moves.get(name, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree.root / name, target)
        names.append(moves.get(name, name))
    return SourceTree(dest, names)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_finds_its_original_text_exactly_once(mutation: Mutation, tree: SourceTree) -> None:
    place, mutated = tree.mutated(mutation)
    assert mutated != tree.text(place.path)


def test_mutation_names_are_unique() -> None:
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))


def test_moved_files_take_their_mutations_with_them_and_the_list_is_not_edited(
    tree: SourceTree, tmp_path: Path
) -> None:
    places = {m.name: tree.locate(m) for m in MUTATIONS}
    # The file most mutations live in, and one holding a def some entry is anchored within,
    # each moved to another folder under another name.
    busiest = collections.Counter(p.path for p in places.values()).most_common(1)[0][0]
    anchored = next(
        places[m.name].path
        for m in MUTATIONS
        if m.within and not m.within.endswith(SUFFIXES) and places[m.name].path != busiest
    )
    moves = {busiest: "core/moved_away/busiest.py", anchored: "adapters/elsewhere/anchored.py"}
    moved = _copy(tree, tmp_path, moves)
    assert busiest not in moved.files
    assert anchored not in moved.files

    for m in MUTATIONS:
        before = places[m.name]
        place, mutated = moved.mutated(m)
        assert place.path == moves.get(before.path, before.path), m.name
        assert (place.start, mutated) == (before.start, tree.mutated(m)[1]), m.name
    assert mutate.list_or_check(list(MUTATIONS), moved, listing=False) == 0


def test_renaming_an_anchored_def_fails_the_check_naming_the_mutation_and_its_anchor(
    tree: SourceTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mutation = next(m for m in MUTATIONS if m.within and not m.within.endswith(SUFFIXES))
    path = tree.locate(mutation).path
    function = mutation.within.rsplit(".", 1)[-1]
    text = tree.text(path)
    assert text.count(f"def {function}(") == 1
    renamed = _write(tmp_path, {path: text.replace(f"def {function}(", f"def {function}_renamed(")})

    with pytest.raises(ListOutOfDate, match="no def by that qualified name"):
        renamed.locate(mutation)
    assert mutate.list_or_check([mutation], renamed, listing=False) == 2
    assert f"{mutation.name}: within {mutation.within!r} not found" in capsys.readouterr().err


def test_an_original_found_twice_in_the_tree_is_refused_naming_both_places(tmp_path: Path) -> None:
    tree = _write(tmp_path, {"core/a.py": "x = 1\nif ok:\n    pass\n", "adapters/b.py": "if ok:\n    pass\n"})
    with pytest.raises(ListOutOfDate, match=r"found 2 times in the tree \(adapters/b.py:1, core/a.py:2\)"):
        tree.locate(M("twice", PRIVACY, "if ok:", "if True:"))
    with pytest.raises(ListOutOfDate, match="not found in the tree"):
        tree.locate(M("nowhere", PRIVACY, "if not ok:", "if False:"))


def test_within_a_def_plants_the_bug_in_that_def_and_nowhere_else(tmp_path: Path) -> None:
    source = (
        "class Valve:\n"
        "    def open(self):\n"
        "        if not ok:\n"
        "            return\n"
        "\n"
        "    @staticmethod\n"
        "    def close():\n"
        "        def inner():\n"
        "            if not ok:\n"
        "                return\n"
        "        if not ok:\n"
        "            return\n"
    )
    tree = _write(tmp_path, {"core/valve.py": source})
    place, mutated = tree.mutated(M("inner", PRIVACY, "if not ok:", "if False:", within="Valve.close.inner"))
    assert (place.path, place.line) == ("core/valve.py", 9)
    assert mutated == source.replace(
        "            if not ok:\n                return", "            if False:\n                return"
    )
    assert mutated.count("if not ok:") == 2
    with pytest.raises(ListOutOfDate, match=r"found 2 times in Valve.close \(core/valve.py\)"):
        tree.locate(M("close", PRIVACY, "if not ok:", "if False:", within="Valve.close"))
    with pytest.raises(ListOutOfDate, match="within 'open' not found: no def"):
        tree.locate(M("unqualified", PRIVACY, "if not ok:", "if False:", within="open"))


def test_within_a_migration_names_its_file(tmp_path: Path) -> None:
    line = "WHEN NEW.kind <> 'private'"
    tree = _write(tmp_path, {"migrations/0001_a.sql": line, "migrations/0002_b.sql": line})
    place = tree.locate(M("second", PRIVACY, line, "WHEN 1", within="0002_b.sql"))
    assert place.path == "migrations/0002_b.sql"
    with pytest.raises(ListOutOfDate, match=r"within '0003_c\.sql' not found: no file by that name"):
        tree.locate(M("missing", PRIVACY, line, "WHEN 1", within="0003_c.sql"))


def test_tests_docs_and_the_list_itself_are_never_searched(tmp_path: Path) -> None:
    line = "if segment.expires_at <= now:"
    tree = _write(
        tmp_path,
        {
            "core/valve.py": line,
            "tests/core/test_valve.py": line,
            "docs/architecture.md": line,
            "bench/mutations.py": line,
            "bench/mutate.py": line,
            "core/notes.txt": line,
        },
    )
    assert tree.files == ["core/valve.py"]
    assert tree.locate(M("expiry", PRIVACY, line, "if False:")).path == "core/valve.py"


def test_an_entry_in_the_older_form_still_reads_its_path_only_as_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _write(tmp_path, {"core/moved/valve.py": "if not ok:\n"})
    older = M("older", PRIVACY, "core/privacy/valve.py", "if not ok:", "if False:")
    assert (older.path, older.original, older.replacement, older.within) == (
        "core/privacy/valve.py",
        "if not ok:",
        "if False:",
        None,
    )
    assert mutate.list_or_check([older], tree, listing=False) == 0
    assert "older: its path hint core/privacy/valve.py is not used; found in core/moved/valve.py" in (
        capsys.readouterr().err
    )
