"""The Stop button (SPEC K2): a `discord.ui` button that rides on a live message while it streams.

With `StreamContext(stop_button=True)` and live delivery, each message the stream creates while
it will still edit it (`SendMessage(streaming=True)`) carries a `StopView`, one per message,
and the message's final edit (`EditMessage(streaming=False)`) removes it (`view=None`); so does
the shell's own final edit after the caller's cancellation (L4). A message sent finished (the
whole answer at once, or messages delivery, whose messages are never edited) carries none.

Pressing it (discord.py calls `StopButton.callback` for the click's INTERACTION_CREATE):

- allowed (C10: the user the stream answers, `StreamContext.answering`, or a member whose
  permissions in the channel include Manage Messages, `interaction_may_stop`): the stop is
  registered first, synchronously, before any Discord request, as
  `request_stop(channel_id, str(user.id), context=<the click>, answering=<the stream's
  answering>)`, so it takes effect at once (B3), and `result.stop_context` is the click's
  interaction (C7); then the click is acknowledged (a deferred update, type 6: the message is
  not changed by the click itself; the stream's final edit removes the button).
- refused: an ephemeral reply to the clicker (`STOP_REFUSED`), and the stream goes on.

Where K2 leaves a choice open, this module decides:
- A button on an answer that names nobody (`answering=None`) makes a channel-wide stop (C9),
  as a `/stop` without a target does; only members who may manage messages may press it (C10).
- A click that arrives once the stream has its result stops nothing (a stop registered then
  would wait for, and end, the user's next answer, B4): it is only acknowledged.
- The views do not outlive the stream (B11): each is stopped (discord.py forgets it) when its
  message's final edit is accepted, and every one left when the stream's result exists. They
  have no timeout, so they start no task of their own. A button whose final edit Discord
  refused stays visible, dead: a click on it is not answered.
- The label and the refusal are English (`STOP_LABEL`, `STOP_REFUSED`); the custom id is
  `STOP_BUTTON_PREFIX` plus a random part, unique per message.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import discord

from cordstream.shell.stops import StopRegistry, interaction_may_stop

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
            self.stops.request_stop(
                self.channel_id, str(click.user.id), click, answering=self.answering
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
