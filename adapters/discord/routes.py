"""The interactions an answer goes to: a slash command's or a button's answer is sent as followups of
its interaction, never as a message in the channel when only the person may see it.

The intake opens a route for each interaction it hands to the core (`InteractionRoutes.open`); the
event carries the route's name (`InboundMessage.route`), the core gives it back with the answer
(`DeliveryTarget.route`), and the sender finds the interaction here. discord.py sends interaction
answers through its webhook adapter, which builds URLs from `Route.BASE` itself: `routed()` points it
at another REST base for the requests made inside it.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
from discord.http import Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from adapters.discord.client import NO_MENTIONS
from core.values.edge import REMEMBERED
from core.values.model import Attachment

log = logging.getLogger(__name__)

# The end of a route's name whose answer must stay ephemeral (a secret command's, outside a DM): if
# its interaction is not known any more, its answer is not sent at all, never to the channel.
CONFINED = ":ephemeral"


def confined(route: str) -> bool:
    """Whether an answer to `route` may only ever go to its interaction, ephemeral."""
    return route.endswith(CONFINED)


@dataclass(frozen=True, slots=True)
class InteractionRoute:
    """An interaction answers go to: `ephemeral` only the person sees them; `direct` in a DM."""

    interaction: discord.Interaction
    ephemeral: bool
    direct: bool


class _RoutedWebhookAdapter(AsyncWebhookAdapter):
    """discord.py's webhook adapter, with URLs on another REST base."""

    def __init__(self, api_base: str) -> None:
        super().__init__()
        self._api_base = api_base

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self._api_base + route.url[len(Route.BASE) :]
        return await super().request(route, session, **kwargs)


class InteractionRoutes:
    """The interactions of this run that answers may go to (the newest REMEMBERED: an answer comes
    within seconds, and an interaction's token lasts 15 minutes), shared by the intake and the sender."""

    def __init__(self, api_base: str | None) -> None:
        self._webhooks = _RoutedWebhookAdapter(api_base) if api_base else None
        self._routes: OrderedDict[str, InteractionRoute] = OrderedDict()

    def open(self, interaction: discord.Interaction, *, ephemeral: bool, direct: bool) -> str:
        """The route of `interaction`'s answers, for the event the intake hands to the core."""
        name = str(interaction.id) + (CONFINED if ephemeral and not direct else "")
        self._routes[name] = InteractionRoute(interaction, ephemeral, direct)
        while len(self._routes) > REMEMBERED:  # answers never sent (a stop) must not pile up
            self._routes.popitem(last=False)
        return name

    def get(self, name: str) -> InteractionRoute | None:
        return self._routes.get(name)

    @contextlib.contextmanager
    def routed(self) -> Iterator[None]:
        """discord.py's interaction requests in this block go to the configured REST base."""
        if self._webhooks is None:
            yield
            return
        token = async_context.set(self._webhooks)
        try:
            yield
        finally:
            async_context.reset(token)

    async def followup(
        self,
        route: InteractionRoute,
        content: str | None,
        *,
        view: discord.ui.View | None = None,
        files: Sequence[Attachment] = (),
    ) -> None:
        """One followup message of the interaction (content None: the files alone). Not sent again
        on a failure: a followup has no nonce, so a repeat after a lost answer would show twice.

        Raises:
            discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError: it was not sent.
        """
        options: dict[str, Any] = {"ephemeral": route.ephemeral, "allowed_mentions": NO_MENTIONS, "wait": True}
        if view is not None:
            options["view"] = view
        if files:
            options["files"] = [discord.File(io.BytesIO(a.data), filename=a.filename) for a in files]
        with self.routed():
            await route.interaction.followup.send(content or discord.utils.MISSING, **options)
