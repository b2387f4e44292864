"""Sealing a private interval's words: each value opens only in its own interval and column, and never once its
key is gone."""

from __future__ import annotations

import base64
import functools
import importlib.util
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.storage.keys import KeyDir
from adapters.storage.sealing import (
    NONCE_BYTES,
    PREFIX,
    SEALED_FIELDS,
    SEALED_PATTERN,
    IntervalKeys,
    KeyLost,
    Plaintext,
    SealBroken,
)
from tests.helpers.proc import ROOT

# IntervalKeys needs the `postgres` extra (`pip install -e '.[postgres]'`); without it only its tests skip.
seals = pytest.mark.skipif(
    importlib.util.find_spec("cryptography") is None,
    reason="pip install -e '.[postgres]': IntervalKeys needs cryptography",
)

CANARY = "SEALED-CANARY-31 private words"
FIELD = "messages.text"


class FakeKeys:
    """Keys in a dict, as KeyDir hands them out."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def key(self, key_id: str) -> bytes | None:
        return self.keys.get(key_id)


def sealer_with(*segments: int) -> tuple[IntervalKeys, FakeKeys]:
    keys = FakeKeys()
    sealer = IntervalKeys(keys)
    for segment in segments:
        keys.keys[f"key-{segment}"] = bytes([segment]) * 32
        sealer.bind(segment, f"key-{segment}")
    return sealer, keys


@functools.cache
def one_interval() -> IntervalKeys:
    return sealer_with(1)[0]


def raw(stored: str) -> bytes:
    body = stored[len(PREFIX) :]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


@seals
@given(text=st.text(), field=st.sampled_from(sorted(SEALED_FIELDS)))
def test_a_sealed_value_opens_to_its_text_and_matches_the_schema_pattern(text, field):
    stored = one_interval().seal(1, field, text)
    assert re.fullmatch(SEALED_PATTERN, stored)
    assert one_interval().open(1, field, stored) == text


@pytest.mark.parametrize(
    "plain",
    [
        CANARY,
        "",
        "hi",
        "s1.",
        "s1.short",
        "s1.this has spaces and is long enough to pass the length check",
        "s1." + "A" * 40 + "\n",
        "S1." + "A" * 40,
        "s2." + "A" * 40,
    ],
)
def test_plain_text_does_not_match_the_schema_pattern(plain):
    assert re.fullmatch(SEALED_PATTERN, plain) is None


@seals
def test_a_sealed_value_holds_no_word_of_its_text():
    stored = one_interval().seal(1, FIELD, CANARY)
    for word in CANARY.split():  # words long enough never to turn up in base64 by chance
        assert word not in stored and word.encode() not in raw(stored)


@seals
def test_a_sealed_value_opens_only_in_its_own_interval_and_column():
    sealer, _ = sealer_with(1, 2)
    stored = sealer.seal(1, "messages.text", CANARY)
    assert sealer.open(1, "messages.text", stored) == CANARY
    with pytest.raises(SealBroken):
        sealer.open(2, "messages.text", stored)  # another interval (another key)
    for column in SEALED_FIELDS - {"messages.text"}:
        with pytest.raises(SealBroken):
            sealer.open(1, column, stored)  # another column of the same interval (the same key)
    # Another interval under the very same key: the segment id in the associated data still refuses it.
    sealer.bind(3, "key-1")
    with pytest.raises(SealBroken):
        sealer.open(3, "messages.text", stored)


@seals
def test_every_value_is_sealed_under_a_nonce_of_its_own():
    values = [one_interval().seal(1, FIELD, CANARY) for _ in range(200)]
    assert len(set(values)) == len(values)
    nonces = {raw(v)[:NONCE_BYTES] for v in values}
    assert len(nonces) == len(values)


@seals
def test_an_altered_value_never_opens():
    stored = one_interval().seal(1, FIELD, CANARY)
    body = stored[len(PREFIX) :]
    flipped = PREFIX + ("B" if body[5] == "A" else "A").join([body[:5], body[6:]])
    for altered in (flipped, stored[:-1], stored + "A", CANARY, PREFIX + "A" * 41):
        with pytest.raises(SealBroken):
            one_interval().open(1, FIELD, altered)


@seals
def test_a_lost_key_opens_to_none_never_to_text(tmp_path):
    folder = tmp_path / "keys"
    key_dir = KeyDir(folder)
    key_dir.ensure()
    sealer = IntervalKeys(key_dir)
    shredded, lost = key_dir.create(expires_at=None), key_dir.create(expires_at=None)
    sealer.bind(1, shredded)
    sealer.bind(2, lost)
    first, second = sealer.seal(1, FIELD, CANARY), sealer.seal(2, FIELD, CANARY)
    key_dir.shred(shredded)
    assert sealer.open(1, FIELD, first) is None
    with pytest.raises(KeyLost):
        sealer.seal(1, FIELD, CANARY)  # nothing more is written for it
    # A restart without the key file (a container without the volume, a restore elsewhere).
    (folder / f"{lost}.never.key").unlink()
    restarted = IntervalKeys(KeyDir(folder))
    restarted.bind(2, lost)
    assert restarted.open(2, FIELD, second) is None
    # A segment no key was ever bound to opens to nothing either.
    assert IntervalKeys(KeyDir(folder)).open(2, FIELD, second) is None


@seals
def test_an_unknown_column_is_refused_before_any_key_is_used():
    with pytest.raises(ValueError, match="not a sealed column"):
        one_interval().seal(1, "messages.said", CANARY)


def test_plaintext_stores_the_text_as_it_is():
    assert Plaintext().seal(1, FIELD, CANARY) == CANARY
    assert Plaintext().open(1, FIELD, CANARY) == CANARY


def test_the_sqlite_path_loads_no_cryptography():
    probe = (
        "import sys\n"
        "from adapters.storage.sealing import Plaintext\n"
        "import adapters.storage.keys\n"
        "Plaintext().seal(1, 'messages.text', 'x')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert out.stdout.strip() == "[]"
