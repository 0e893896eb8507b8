"""Where an interaction's answer stands (`cordstream.domain.interaction`, SPEC K1): pure, no loop.

The named tests walk one rule each. `AnswerMachine` plays a shell against a small model of
Discord: it begins with each kind of prior response, reports every deferral and look-up outcome,
sends messages and embeds, edits, lets the token die at any moment, and settles with any status,
Discord accepting, refusing as expired, or failing each request through the token. After every
step it checks:

- once the token is dead (or the deferral failed), no route uses it, and it never comes back;
  while it lives, nothing goes through the channel but a channel message's edit;
- the original response only moves forward: once it stops thinking, it never thinks again;
- Discord shows "thinking…" only while the answer knows it (or after a delete Discord refused);
- a thinking message whose id is known is deleted before the channel takes over;
- settling with any status but `function_call` leaves nothing thinking, in the answer and, when
  a route reaches the message, in Discord; `function_call` changes nothing;
- "typing" shows exactly when nothing is thinking.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from cordstream.domain import StreamStatus
from cordstream.domain.interaction import (
    Accepted,
    Answer,
    DeleteInChannel,
    DeleteOriginal,
    EditByToken,
    EditChannelMessage,
    EditInChannel,
    EditOriginal,
    FollowUp,
    NoOriginal,
    Opening,
    Outcome,
    Prior,
    Refused,
    SendInChannel,
    Settling,
    Shown,
    Thinking,
    Unreachable,
    begin,
    deferred,
    looked_up,
    route_edit,
    route_message,
    settle,
    shown,
    shows_typing,
    thinking_deleted,
    token_expired,
)
from tests.support.fuzz import examples

THINKING_ID: Final = 42  # the id Discord gives the deferral's "thinking…" message
EXPIRED: Final = Refused(status=401, code=50027)
ACKNOWLEDGED: Final = Refused(status=400, code=40060)
MISSING_PERMISSIONS: Final = Refused(status=403, code=50013)
STATUSES: Final[tuple[StreamStatus | None, ...]] = (*get_args(StreamStatus), None)
ENDINGS: Final = tuple(status for status in STATUSES if status != "function_call")


# -- the start --------------------------------------------------------------------------------


def test_K1_an_unanswered_interaction_is_deferred_and_thinks_meanwhile() -> None:
    assert begin("none") == Opening(Answer(Thinking()), "defer")


def test_K1_a_deferral_the_bot_made_itself_is_filled_once_its_message_is_looked_up() -> None:
    assert begin("deferred") == Opening(Answer(Thinking()), "original_id")


def test_K1_an_interaction_answered_another_way_gets_only_follow_ups() -> None:
    opening = begin("other")
    assert opening == Opening(Answer(NoOriginal()), "nothing")
    assert route_message(opening.answer) == FollowUp()


def test_K1_the_deferrals_message_id_is_kept_while_it_thinks() -> None:
    answer = deferred(begin("none").answer, Accepted(THINKING_ID))
    assert answer == Answer(Thinking(THINKING_ID))


def test_K1_a_deferral_already_acknowledged_elsewhere_means_follow_ups_only() -> None:
    answer = deferred(begin("none").answer, ACKNOWLEDGED)
    assert answer == Answer(NoOriginal(), "live")
    assert route_message(answer) == FollowUp()


@pytest.mark.parametrize(
    "failure",
    [Refused(status=404, code=10062), EXPIRED, Refused(status=503), Unreachable()],
    ids=["deadline-missed", "token-dead", "server-error", "connection-error"],
)
def test_K1_a_deferral_that_fails_otherwise_delivers_everything_in_the_channel(
    failure: Outcome,
) -> None:
    answer = deferred(begin("none").answer, failure)
    assert answer == Answer(NoOriginal(), "dead")
    assert route_message(answer) == SendInChannel()


def test_K1_a_deferral_answered_after_the_answer_settled_stays_settled() -> None:
    settled = settle(begin("none").answer, "empty_response").answer
    assert deferred(settled, Accepted(THINKING_ID)) == settled


def test_K1_a_looked_up_deferral_keeps_its_message_id() -> None:
    answer = looked_up(begin("deferred").answer, Accepted(THINKING_ID))
    assert answer == Answer(Thinking(THINKING_ID))


def test_K1_a_look_up_refused_as_expired_sends_in_the_channel() -> None:
    answer = looked_up(begin("deferred").answer, EXPIRED)
    assert answer == Answer(Thinking(None), "dead")
    assert route_message(answer) == SendInChannel(delete_first=None)


@pytest.mark.parametrize("failure", [Refused(status=500), Unreachable()], ids=["500", "conn"])
def test_K1_a_look_up_that_fails_otherwise_leaves_the_token_to_fill_the_response(
    failure: Outcome,
) -> None:
    answer = looked_up(begin("deferred").answer, failure)
    assert answer == Answer(Thinking(None), "live")
    assert route_message(answer) == EditOriginal()


# -- requests ---------------------------------------------------------------------------------


def test_K1_the_first_message_fills_the_thinking_original_response() -> None:
    assert route_message(Answer(Thinking(THINKING_ID))) == EditOriginal()


def test_K1_an_error_before_any_text_replaces_thinking() -> None:
    """A message and an embed share one route: before any text, an error embed fills the
    thinking response, publicly, as Discord does with a pending deferral's first follow-up."""
    assert route_message(Answer(Thinking())) == EditOriginal()


def test_K1_once_the_original_response_shows_a_message_the_rest_are_follow_ups() -> None:
    answer = shown(Answer(Thinking(THINKING_ID)))
    assert answer == Answer(Shown())
    assert route_message(answer) == FollowUp()


@pytest.mark.parametrize(
    ("refusal", "dead"),
    [
        (EXPIRED, True),
        (Refused(status=401), True),
        (Refused(code=50027), True),
        (Refused(status=404, code=10008), False),
        (MISSING_PERMISSIONS, False),
        (Refused(status=403, code=50001), False),
    ],
)
def test_K1_a_refusal_with_401_or_50027_means_the_token_expired(
    refusal: Refused, dead: bool
) -> None:
    assert refusal.token_is_dead is dead


@pytest.mark.parametrize("original", [Shown(), NoOriginal()], ids=["shown", "none"])
def test_K1_once_the_token_expires_every_message_goes_to_the_channel(
    original: Shown | NoOriginal,
) -> None:
    assert route_message(token_expired(Answer(original))) == SendInChannel()


def test_K1_a_thinking_message_is_deleted_through_the_channel_before_it_takes_over() -> None:
    answer = token_expired(Answer(Thinking(THINKING_ID)))
    assert route_message(answer) == SendInChannel(delete_first=THINKING_ID)
    answer = thinking_deleted(answer)
    assert answer == Answer(NoOriginal(), "dead")
    assert route_message(answer) == SendInChannel()


def test_K1_a_thinking_message_of_unknown_id_is_left_to_discord_once_the_token_is_dead() -> None:
    answer = token_expired(Answer(Thinking(None)))
    assert route_message(answer) == SendInChannel(delete_first=None)
    assert not shows_typing(answer)  # Discord still shows "thinking…"


def test_K1_an_interaction_message_is_edited_by_the_token_while_it_lives() -> None:
    assert route_edit(Answer(Shown()), through_token=True) == EditByToken()


def test_K1_an_interaction_message_is_edited_through_the_channel_once_the_token_is_dead() -> None:
    assert route_edit(token_expired(Answer(Shown())), through_token=True) == EditInChannel()


@pytest.mark.parametrize("token", ["live", "dead"])
def test_K1_a_channel_message_is_edited_by_its_own_route(token: Literal["live", "dead"]) -> None:
    assert route_edit(Answer(NoOriginal(), token), through_token=False) == EditChannelMessage()


def test_K1_no_typing_while_discord_shows_thinking() -> None:
    assert not shows_typing(Answer(Thinking(THINKING_ID)))


@pytest.mark.parametrize("original", [Shown(), NoOriginal()], ids=["shown", "none"])
def test_K1_typing_shows_once_nothing_is_thinking(original: Shown | NoOriginal) -> None:
    assert shows_typing(Answer(original))


def test_K1_the_token_once_dead_stays_dead() -> None:
    answer = token_expired(Answer(Thinking(THINKING_ID)))
    assert token_expired(answer) == answer
    assert shown(thinking_deleted(answer)).token == "dead"


def test_K1_a_shown_response_never_thinks_again() -> None:
    answer = Answer(Shown())
    assert deferred(answer, Accepted(THINKING_ID)) == answer
    assert looked_up(answer, Accepted(THINKING_ID)) == answer
    assert thinking_deleted(answer) == answer


# -- the end ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ENDINGS)
def test_K1_nothing_is_left_thinking_the_token_deletes_it(status: StreamStatus | None) -> None:
    assert settle(Answer(Thinking(THINKING_ID)), status) == Settling(
        Answer(NoOriginal()), DeleteOriginal()
    )


def test_K1_after_the_token_expired_the_channel_deletes_the_thinking_message() -> None:
    answer = token_expired(Answer(Thinking(THINKING_ID)))
    assert settle(answer, "completed") == Settling(
        Answer(NoOriginal(), "dead"), DeleteInChannel(THINKING_ID)
    )


def test_K1_a_token_refused_while_settling_settles_again_through_the_channel() -> None:
    """The shell reports the refusal and settles the answer it began with, now expired."""
    answer = Answer(Thinking(THINKING_ID))
    assert settle(answer, "empty_response").delete == DeleteOriginal()
    again = settle(token_expired(answer), "empty_response")
    assert again == Settling(Answer(NoOriginal(), "dead"), DeleteInChannel(THINKING_ID))


def test_K1_a_thinking_message_no_route_reaches_is_forgotten() -> None:
    answer = token_expired(Answer(Thinking(None)))
    assert settle(answer, "error") == Settling(Answer(NoOriginal(), "dead"))


def test_K1_a_function_call_leaves_the_answer_thinking_for_the_next_segment() -> None:
    answer = Answer(Thinking(THINKING_ID))
    assert settle(answer, "function_call") == Settling(answer)
    assert route_message(answer) == EditOriginal()  # the next segment fills it


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("original", [Shown(), NoOriginal()], ids=["shown", "none"])
def test_K1_settling_leaves_a_response_that_does_not_think_alone(
    original: Shown | NoOriginal, status: StreamStatus | None
) -> None:
    assert settle(Answer(original), status) == Settling(Answer(original))


# -- every answer, every input ----------------------------------------------------------------

ANSWERS = st.builds(
    Answer,
    st.one_of(
        st.builds(Thinking, st.none() | st.just(THINKING_ID)),
        st.just(Shown()),
        st.just(NoOriginal()),
    ),
    st.sampled_from(("live", "dead")),
)
OUTCOMES = st.sampled_from(
    (
        Accepted(THINKING_ID),
        Accepted(None),
        ACKNOWLEDGED,
        EXPIRED,
        Refused(status=404, code=10062),
        Refused(status=500),
        Unreachable(),
    )
)


@settings(max_examples=examples(200), deadline=None)
@given(answer=ANSWERS, outcome=OUTCOMES, status=st.sampled_from(STATUSES))
def test_K1_every_decision_is_defined_for_every_answer(
    answer: Answer, outcome: Outcome, status: StreamStatus | None
) -> None:
    """Total: no answer and input the shell could report is left out (h2's table, checked)."""
    for after in (
        deferred(answer, outcome),
        looked_up(answer, outcome),
        shown(answer),
        thinking_deleted(answer),
        token_expired(answer),
        settle(answer, status).answer,
    ):
        assert isinstance(after, Answer)
        assert after.token == "dead" or answer.token == "live"  # never revived
    assert isinstance(route_message(answer), EditOriginal | FollowUp | SendInChannel)
    for through_token in (True, False):
        assert isinstance(
            route_edit(answer, through_token=through_token),
            EditByToken | EditInChannel | EditChannelMessage,
        )
    assert isinstance(shows_typing(answer), bool)


# -- the state machine ------------------------------------------------------------------------

Reply: TypeAlias = Literal["accepted", "failed"]  # Discord's answer to a request, token alive
DEFERRAL_OUTCOMES = st.sampled_from(
    (
        Accepted(THINKING_ID),
        Accepted(None),
        ACKNOWLEDGED,
        Refused(status=404, code=10062),
        EXPIRED,
        Unreachable(),
    )
)
LOOK_UP_OUTCOMES = st.sampled_from((Accepted(THINKING_ID), EXPIRED, Refused(500), Unreachable()))
_REPLIES: tuple[Reply, ...] = ("accepted", "accepted", "failed")
REPLIES = st.sampled_from(_REPLIES)


class AnswerMachine(RuleBasedStateMachine):
    """One interaction, streamed into by any number of streams; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = Answer(NoOriginal())
        self.discord_thinks = False  # Discord shows the "thinking…" original response
        self.token_alive = True  # Discord still takes the token
        self.token_trusted = True  # no deferral failed (the token cannot be counted on then)
        self.stopped_thinking = False  # the answer once left "thinking"
        self.token_died = False  # the answer once learned the token is dead
        self.abandoned = False  # Discord thinks, and nothing more can be done about it

    # -- Discord, as the shell sees it ----------------------------------------------------------

    def through_token(self, reply: Reply) -> Literal["accepted", "failed", "expired"]:
        """What Discord answers a request through the token; an expired one is reported."""
        assert self.answer.token == "live", "a route used a token the answer knows is dead"
        assert self.token_trusted, "a route used the token of a deferral that failed"
        if not self.token_alive:
            self.answer = token_expired(self.answer)
            return "expired"
        return reply

    def channel_deletes(self, message_id: int) -> None:
        assert message_id == THINKING_ID, "the channel deletes only the thinking message"
        self.discord_thinks = False

    # -- rules --------------------------------------------------------------------------------

    @initialize(
        prior=st.sampled_from(get_args(Prior)),
        deferral=DEFERRAL_OUTCOMES,
        look_up=LOOK_UP_OUTCOMES,
    )
    def begins(self, prior: Prior, deferral: Outcome, look_up: Outcome) -> None:
        """The first stream begins; the shell reports what Discord answered its first ask."""
        opening = begin(prior)
        self.answer = opening.answer
        self.discord_thinks = prior == "deferred"
        match opening.ask:
            case "defer":
                self.discord_thinks = isinstance(deferral, Accepted)
                self.token_alive = deferral != EXPIRED
                self.token_trusted = isinstance(deferral, Accepted) or deferral == ACKNOWLEDGED
                self.answer = deferred(self.answer, deferral)
            case "original_id":
                self.token_alive = look_up != EXPIRED
                self.answer = looked_up(self.answer, look_up)
            case "nothing":
                pass

    @rule()
    def token_dies(self) -> None:
        self.token_alive = False

    @rule(reply=REPLIES, kind=st.sampled_from(("text", "embed")))
    def new_message(self, reply: Reply, kind: str) -> None:
        for _ in range(2):  # once more after the token expired
            before = self.answer
            route = route_message(before)
            match route:
                case EditOriginal():
                    got = self.through_token(reply)
                    if got == "accepted":
                        self.answer, self.discord_thinks = shown(self.answer), False
                    if got != "expired":
                        return
                case FollowUp():
                    if self.through_token(reply) != "expired":
                        return
                case SendInChannel(delete_first=thinking):
                    if isinstance(before.original, Thinking) and before.token == "dead":
                        assert thinking == before.original.message_id
                    if thinking is not None:
                        self.answer = thinking_deleted(self.answer)
                        self.channel_deletes(thinking)
                    return
        raise AssertionError("a request went through the expired token twice")

    @rule(reply=REPLIES, through_token=st.booleans())
    def edit(self, reply: Reply, through_token: bool) -> None:
        for _ in range(2):  # once more after the token expired
            route = route_edit(self.answer, through_token=through_token)
            match route:
                case EditByToken():
                    assert through_token
                    if self.through_token(reply) != "expired":
                        return
                case EditInChannel():
                    assert through_token
                    return
                case EditChannelMessage():
                    assert not through_token
                    return
        raise AssertionError("an edit went through the expired token twice")

    @rule(status=st.sampled_from(STATUSES), reply=REPLIES)
    def settles(self, status: StreamStatus | None, reply: Reply) -> None:
        began = answer = self.answer
        for _ in range(2):  # once more after the token expired
            settling = settle(answer, status)
            self.answer = settling.answer
            match settling.delete:
                case None:
                    break
                case DeleteOriginal():
                    got = self.through_token(reply)
                    if got == "accepted":
                        self.discord_thinks = False
                    elif got == "failed":
                        self.abandoned = self.discord_thinks
                    if got != "expired":
                        break
                    answer = token_expired(answer)
                case DeleteInChannel(message_id=message_id):
                    self.channel_deletes(message_id)
                    break
        else:
            raise AssertionError("settling went through the expired token twice")
        if status == "function_call":
            assert self.answer == began
            return
        assert not self.answer.thinking
        if began.original == Thinking(None) and not self.token_alive:
            self.abandoned = self.discord_thinks  # no route reaches it: Discord ends it
        assert self.abandoned or not self.discord_thinks, "settled, and Discord still thinks"

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def a_dead_token_is_never_used(self) -> None:
        if self.answer.token == "dead":
            assert isinstance(route_message(self.answer), SendInChannel)
            assert route_edit(self.answer, through_token=True) == EditInChannel()
            assert not isinstance(settle(self.answer, "completed").delete, DeleteOriginal)

    @invariant()
    def the_channel_serves_only_a_dead_token(self) -> None:
        if self.answer.token == "live":
            assert not isinstance(route_message(self.answer), SendInChannel)
            assert route_edit(self.answer, through_token=True) == EditByToken()
        assert route_edit(self.answer, through_token=False) == EditChannelMessage()

    @invariant()
    def nothing_comes_back(self) -> None:
        if self.answer.token == "dead":
            self.token_died = True
        assert self.answer.token == "dead" or not self.token_died, "the token came back"
        if not self.answer.thinking:
            self.stopped_thinking = True
        assert not (self.stopped_thinking and self.answer.thinking), "it thinks again"

    @invariant()
    def discord_thinks_only_while_the_answer_knows(self) -> None:
        if self.discord_thinks and not self.abandoned:
            assert self.answer.thinking

    @invariant()
    def a_known_thinking_message_goes_before_the_channel_takes_over(self) -> None:
        match self.answer:
            case Answer(Thinking(message_id=int(message_id)), "dead"):
                assert route_message(self.answer) == SendInChannel(delete_first=message_id)

    @invariant()
    def typing_shows_exactly_when_nothing_thinks(self) -> None:
        assert shows_typing(self.answer) is not self.answer.thinking


TestAnswerMachine = AnswerMachine.TestCase
TestAnswerMachine.settings = settings(
    max_examples=examples(300),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
