"""The mutation list follows the code: each entry finds its one place by its text, wherever its file moves."""

from __future__ import annotations

import pytest

from bench import mutate
from bench._anchors import SourceTree


@pytest.fixture(scope="module")
def tree() -> SourceTree:
    return SourceTree.of(mutate.ROOT)


@pytest.mark.parametrize("mutation", mutate.MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_finds_its_original_text_exactly_once(mutation: mutate.Mutation, tree: SourceTree) -> None:
    place, mutated = tree.mutated(mutation)
    assert mutated != tree.text(place.path)


def test_mutation_names_are_unique() -> None:
    names = [m.name for m in mutate.MUTATIONS]
    assert len(names) == len(set(names))
