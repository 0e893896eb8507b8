"""The Stop button (SPEC K2): a `discord.ui` button that rides on a live message while it streams.

Theory of operation: each message the stream creates while it will still edit it carries a
`StopView` of its own (`StopControl.view`), and its final edit removes it; the courier
(`cordstream.shell.courier`) holds the views as handles and stops them when the stream has its
result. Pressing the button (discord.py calls `StopButton.callback` for the click) asks C10 of
the clicker (`interaction_may_stop`): allowed, the stop is registered first, synchronously,
before any Discord request, so it takes effect at once (B3), then the click is acknowledged;
refused, the clicker gets an ephemeral reply and the stream goes on. A click after the result
stops nothing. The rules in full are K2's, in `docs/contract.md`.

Many processes (SPEC N1): Discord sends a click to the process on the gateway, which is not
always the one streaming the answer (a worker fed through a queue has no gateway at all). So a
button's custom id says whose answer it stops (`stop_custom_id`), and `stop_clicks(stops)` is a
`discord.ui.DynamicItem` class that a gateway process registers (`client.add_dynamic_items`):
it handles a click on any Stop button no view of its own process shows, by the same rule,
through a registry the streaming process shares (`RedisStopRegistry`), while that answer still
streams somewhere.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

import discord

from cordstream.shell.stops import StopRegistry, interaction_may_stop, registered

__all__ = [
    "STOP_BUTTON_PREFIX",
    "STOP_LABEL",
    "STOP_REFUSED",
    "StopButton",
    "StopControl",
    "StopView",
    "stop_clicks",
    "stop_custom_id",
]

STOP_LABEL: Final = "Stop"
STOP_REFUSED: Final = "Only the person this answer is for, or a moderator, can stop it."
STOP_BUTTON_PREFIX: Final = "cordstream:stop:"
STOP_BUTTON_ID: Final = re.compile(
    re.escape(STOP_BUTTON_PREFIX) + r"(?P<answering>[0-9]+|-):(?P<nonce>[0-9a-f]{16})"
)
"""A Stop button's custom id: the prefix, the user the answer is for (`-`: the channel's
answer), a random part unique per message."""

_SHOWN: set[str] = set()
"""The custom ids of the Stop buttons this process's views show, while they do: a click on one
of them is the view's, not `stop_clicks`'."""


def stop_custom_id(answering: int | None) -> str:
    """A new Stop button's custom id (`STOP_BUTTON_ID`) for an answer to `answering`."""
    whose = "-" if answering is None else str(answering)
    return f"{STOP_BUTTON_PREFIX}{whose}:{secrets.token_hex(8)}"


@dataclass(frozen=True, eq=False)
class StopControl:
    """What a stream's Stop buttons stop: its answer (`answering`) in `channel_id`, through
    `stops`, while `running()` (the stream has no result yet)."""

    stops: StopRegistry
    channel_id: int
    answering: int | None
    running: Callable[[], bool]

    def press(self, click: discord.Interaction[Any]) -> bool:
        """A click: False when refused (C10); else the stop is registered now, if the stream
        still runs, and True."""
        if not interaction_may_stop(click, answering=self.answering):
            return False
        if self.running():
            registered(  # at once; a shared registry's in the background (N1)
                self.stops.request_stop(
                    self.channel_id, str(click.user.id), click, answering=self.answering
                )
            )
        return True

    def view(self) -> StopView:
        """A new view with one Stop button, for one message."""
        return StopView(self)


class StopButton(discord.ui.Button["StopView"]):
    """The button; its click goes to `StopControl.press`, then is answered."""

    def __init__(self, control: StopControl) -> None:
        self.stop_id = stop_custom_id(control.answering)
        super().__init__(
            label=STOP_LABEL, style=discord.ButtonStyle.secondary, custom_id=self.stop_id
        )
        self.control = control

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        allowed = self.control.press(interaction)  # before any await: the stop is immediate
        await _answer_click(interaction, allowed=allowed)


async def _answer_click(interaction: discord.Interaction[Any], *, allowed: bool) -> None:
    """Acknowledge an allowed click; tell a refused clicker why, privately."""
    try:
        if allowed:
            await interaction.response.defer()
        else:
            await interaction.response.send_message(
                STOP_REFUSED, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
            )
    except discord.HTTPException:  # a late click (10062): the stop, if any, stands
        pass


class StopView(discord.ui.View):
    """One message's Stop button (no timeout: it lives as long as the stream, see above)."""

    def __init__(self, control: StopControl) -> None:
        super().__init__(timeout=None)
        self.button = StopButton(control)
        self.add_item(self.button)
        _SHOWN.add(self.button.stop_id)

    def stop(self) -> None:
        _SHOWN.discard(self.button.stop_id)
        super().stop()


class _RemoteStop(discord.ui.DynamicItem[discord.ui.Button[Any]], template=STOP_BUTTON_ID):
    """A click on a Stop button no view of this process shows (see `stop_clicks`)."""

    stops: ClassVar[StopRegistry]

    def __init__(self, custom_id: str, answering: int | None) -> None:
        super().__init__(discord.ui.Button(label=STOP_LABEL, custom_id=custom_id))
        self.answering = answering

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[Any], item: discord.ui.Item[Any], match: re.Match[str]
    ) -> Self:
        whose = match["answering"]
        return cls(match[0], None if whose == "-" else int(whose))

    async def interaction_check(self, interaction: discord.Interaction[Any]) -> bool:
        return self.custom_id not in _SHOWN  # this process's own view answers it

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        channel_id = interaction.channel_id
        allowed = interaction_may_stop(interaction, answering=self.answering)
        if allowed and channel_id is not None and self.stops.streaming(channel_id, self.answering):
            registered(  # a shared registry's in the background: the click is answered now
                self.stops.request_stop(
                    channel_id, str(interaction.user.id), interaction, answering=self.answering
                )
            )
        await _answer_click(interaction, allowed=allowed)


def stop_clicks(stops: StopRegistry) -> type[discord.ui.DynamicItem[discord.ui.Button[Any]]]:
    """The Stop buttons of answers streamed in other processes, for a process on Discord's
    gateway: `client.add_dynamic_items(stop_clicks(stops))`, with `stops` the registry the
    streaming processes share (a `RedisStopRegistry`). A click is C10's as on the streaming
    process: allowed, the answer stops if it still streams (a click after its result stops
    nothing) and the click is acknowledged; refused, the clicker is told, privately. A click on
    a button of this process's own streams is left to their views."""
    return type("StopClicks", (_RemoteStop,), {"stops": stops}, template=STOP_BUTTON_ID)
