"""What a model server has shown it cannot do, learned during a run: streaming (per request shape) and image input.

A request's shape is whether it offers tools: llama-cpp-python's chatml-function-calling streams a
request without tools but answers `stream: true` with tools and `tool_choice: "auto"` with an empty
stream, so each shape is learned apart. Normal requests are shaped by what normal requests taught
alone. A private turn's request reads that and what private requests taught, kept apart and never
written back: private turns do not fail the same way each time, and teach normal mode nothing.
"""

from __future__ import annotations

import enum
import logging

from core.values.model import CompletionRequest

log = logging.getLogger(__name__)


class Trait(enum.Enum):
    """Something a request may ask of the server that the server may turn out not to do."""

    STREAM_WITH_TOOLS = "a streamed request that offers tools"
    STREAM_WITHOUT_TOOLS = "a streamed request without tools"
    IMAGES = "image input"


def stream_trait(request: CompletionRequest) -> Trait:
    """The streaming of `request`'s shape."""
    return Trait.STREAM_WITH_TOOLS if request.tools else Trait.STREAM_WITHOUT_TOOLS


class ServerTraits:
    """The traits a server refused, each with why in our words; for normal requests and, apart, for private ones."""

    def __init__(self) -> None:
        self._normal: dict[Trait, str] = {}
        # What private requests taught: read by private requests only, over the normal ones.
        self._private: dict[Trait, str] = {}
        self._warned: set[Trait] = set()

    def allows(self, trait: Trait, request: CompletionRequest) -> bool:
        """Whether `request` may still ask for `trait`: refused by no request of its mode (a private
        request also reads what normal requests taught)."""
        if trait in self._normal:
            return False
        return not (request.private and trait in self._private)

    def refused(self, trait: Trait, request: CompletionRequest, why: str) -> None:
        """The server refused `trait` to `request`: no request of its mode asks for it again this run.
        One warning per trait and run, whichever mode met the refusal first."""
        learned = self._private if request.private else self._normal
        learned.setdefault(trait, why)
        if trait in self._warned:
            return
        self._warned.add(trait)
        if trait is Trait.IMAGES:
            log.warning(
                "the model server refuses image input; images are left out from now on "
                "(set COMPANION_LLM_VISION=false for a model that does not read images)"
            )
        elif trait is Trait.STREAM_WITHOUT_TOOLS:
            log.warning(
                "the model server does not stream (%s); replies are sent whole from now on "
                "(COMPANION_STREAM_EDIT_SECONDS=off stops asking it to stream)",
                why,
            )
        else:
            log.warning(
                "the model server does not stream a request that offers tools (%s); such requests are sent "
                "unstreamed from now on, so replies are sent whole while tools are offered: "
                "COMPANION_LLM_TOOLS=false gets streaming back if the server streams without tools (memory then "
                "works through /remember, /recall and /forget), or COMPANION_STREAM_EDIT_SECONDS=off stops asking",
                why,
            )

    def why(self, trait: Trait) -> str | None:
        """Why normal requests no longer ask for `trait`, or None while they do (`companion doctor` says it)."""
        return self._normal.get(trait)
