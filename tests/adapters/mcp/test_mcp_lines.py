"""A stdio server's output cut into lines: each chunk scanned once, a line past the limit dropped as it comes."""

from __future__ import annotations

from adapters.mcp import stdio


def test_lines_are_whole_across_chunks_and_an_overlong_one_is_dropped_not_held(monkeypatch) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 10)
    lines = stdio._Lines()
    fed = [lines.feed(chunk) for chunk in (b"ab", b"c\nde", b"f\n", b"0123456789x", b"yy", b"y\nok\n", b"\n")]
    assert fed == [[], [b"abc"], [b"def"], [None], [], [b"ok"], [b""]]
