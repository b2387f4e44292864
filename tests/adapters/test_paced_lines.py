"""How the model link reads a streamed answer (adapters/llm/streaming.py `paced_lines`): lines cut
anywhere by the network come out whole, and after a read that waited for the server the next one
waits a moment, so a stream of one token at a time costs a few reads a second, not one a token."""

from __future__ import annotations

from collections.abc import AsyncIterator

from adapters.llm.streaming import paced_lines


class Network:
    """Chunks as the server's writes arrive: `(seconds waited for it, bytes)`, on a fake clock."""

    def __init__(self, chunks: list[tuple[float, bytes]]) -> None:
        self.chunks = chunks
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def body(self) -> AsyncIterator[bytes]:
        for waited, chunk in self.chunks:
            self.now += waited
            yield chunk


async def lines_of(network: Network, gap: float = 0.3) -> list[str]:
    return [
        line async for line in paced_lines(network.body(), gap=gap, sleep=network.sleep, monotonic=network.monotonic)
    ]


async def test_lines_cut_anywhere_by_the_network_come_out_whole():
    text = 'data: {"a": "caf\u00e9 \U0001f44d"}\r\n\r\ndata: [DONE]\n\n'.encode()
    for cut in range(1, len(text)):
        network = Network([(0.0, text[:cut]), (0.0, text[cut:])])
        assert await lines_of(network) == ['data: {"a": "caf\u00e9 \U0001f44d"}', "", "data: [DONE]", ""], cut


async def test_a_last_line_without_its_end_is_not_lost():
    assert await lines_of(Network([(0.0, b"data: x\n\ndata: [DONE]")])) == ["data: x", "", "data: [DONE]"]


async def test_after_a_read_that_waited_the_next_one_waits_a_moment():
    # One token every 50 ms: each read waited for the server, so each is followed by the gap
    # (during which the server's next events pile up in the socket and come in one read).
    network = Network([(0.05, b"data: %d\n\n" % n) for n in range(4)])
    assert len(await lines_of(network)) == 8
    assert network.sleeps == [0.3, 0.3, 0.3, 0.3]


async def test_what_was_already_received_is_read_at_once():
    network = Network([(0.5, b"data: 1\n\n"), (0.0, b"data: 2\n\n"), (0.0, b"data: 3\n\n")])
    assert len(await lines_of(network)) == 6
    assert network.sleeps == [0.3]  # only after the read that waited


async def test_only_cr_lf_and_crlf_end_a_line():
    # A JSON string may hold U+2028, U+2029 and U+0085 unescaped (llama.cpp's server writes them so): they
    # are words of the answer, not the ends of lines, which in an event stream are \r\n, \r and \n only.
    words = "one\u2028two\u2029three\u0085four\x0bfive\x0csix\x1cseven"
    text = f'data: {{"a": "{words}"}}\r\rdata: [DONE]\r\n'.encode()
    for cut in range(1, len(text)):
        network = Network([(0.0, text[:cut]), (0.0, text[cut:])])
        assert await lines_of(network) == [f'data: {{"a": "{words}"}}', "", "data: [DONE]"], cut


async def test_a_body_ending_inside_a_line_ends_that_line():
    assert await lines_of(Network([(0.0, b"data: x\r")])) == ["data: x"]
    assert await lines_of(Network([(0.0, b"data: x\r\ndata: y")])) == ["data: x", "data: y"]
