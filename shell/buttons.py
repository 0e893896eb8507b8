"""The Stop button (SPEC K2): a `discord.ui` button that rides on a live message while it streams.

Theory of operation: each message the stream creates while it will still edit it carries a
`StopView` of its own (`StopControl.view`), and its final edit removes it; the courier
(`cordstream.shell.courier`) holds the views as handles and stops them when the stream has its
result. Pressing the button (discord.py calls `StopButton.callback` for the click) asks C10 of
the clicker (`interaction_may_stop`): allowed, the stop is registered first, synchronously,
before any Discord request, so it takes effect at once (B3), then the click is acknowledged;
refused, the clicker gets an ephemeral reply and the stream goes on. A click after the result
stops nothing. The rules in full are K2's, in `docs/contract.md`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import discord

from cordstream.shell.stops import StopRegistry, interaction_may_stop, registered

__all__ = [
    "STOP_BUTTON_PREFIX",
    "STOP_LABEL",
    "STOP_REFUSED",
    "StopButton",
    "StopControl",
    "StopView",
]

STOP_LABEL: Final = "Stop"
STOP_REFUSED: Final = "Only the person this answer is for, or a moderator, can stop it."
STOP_BUTTON_PREFIX: Final = "cordstream:stop:"


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
        super().__init__(
            label=STOP_LABEL,
            style=discord.ButtonStyle.secondary,
            custom_id=STOP_BUTTON_PREFIX + secrets.token_hex(8),
        )
        self.control = control

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        allowed = self.control.press(interaction)  # before any await: the stop is immediate
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
