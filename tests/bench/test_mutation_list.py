"""The mutation list follows the code: a guarded line that moves takes its mutation with it."""

from __future__ import annotations

import pytest

from bench import mutate


@pytest.mark.parametrize("mutation", mutate.MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_finds_its_original_text_exactly_once(mutation: mutate.Mutation) -> None:
    mutated = mutate.check(mutation)
    assert mutated != (mutate.ROOT / mutation.path).read_text(encoding="utf-8")


def test_mutation_names_are_unique() -> None:
    names = [m.name for m in mutate.MUTATIONS]
    assert len(names) == len(set(names))
