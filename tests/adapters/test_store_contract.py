"""The SQLite store implements every method of the core's store port, with the same signature."""

from __future__ import annotations

import inspect

import pytest

from adapters.storage.sqlite import SqliteStore
from core import ports

PORTS = [
    ports.TimelineStore,
    ports.ModeStore,
    ports.MemoryStore,
    ports.LifetimeStore,
    ports.BindingStore,
    ports.ProactiveStore,
    ports.LinkStore,
    ports.QuoteStore,
]


def port_methods(port) -> list[str]:
    return [name for name, value in vars(port).items() if callable(value) and not name.startswith("_")]


@pytest.mark.parametrize("port", PORTS, ids=lambda p: p.__name__)
def test_sqlite_store_implements_every_port_method_with_its_parameters(port, tmp_path):
    store = SqliteStore(tmp_path / "never-started.db")  # the facade binds its query classes' methods
    for name in port_methods(port):
        implementation = getattr(store, name, None)
        assert implementation is not None, f"SqliteStore lacks {port.__name__}.{name}"
        expected = list(inspect.signature(getattr(port, name)).parameters)[1:]  # without self
        actual = inspect.signature(implementation).parameters
        assert list(actual)[: len(expected)] == expected, f"{name}: {list(actual)} does not start with {expected}"
        extras = list(actual.values())[len(expected) :]
        assert all(p.default is not inspect.Parameter.empty for p in extras), f"{name}: extra parameters need defaults"


def test_the_base_store_is_the_union_of_the_ports():
    assert set(port_methods(ports.BaseStore)) == set()  # nothing beyond its parts
    assert set(ports.BaseStore.__mro__) >= set(PORTS)
