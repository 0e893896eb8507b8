"""The final edits after the caller's cancellation (`cordstream.domain.final`, L4, K2), pure:
which live messages still need one and what each shows. Driven through the reducer with
`tests.live_driver.LiveDriver` by hand (turns granted and requests answered one at a time)."""

from __future__ import annotations

from cordstream.domain import EditMessage, SendMessage, StreamConfig, initial_state
from cordstream.domain.final import FinalEdit, cancel_edits
from tests.support.live_driver import LiveDriver, live

CURSOR = " \u258c"


def manual(**config: object) -> LiveDriver:
    driver = LiveDriver(live(**config), auto=False)
    driver.start()
    return driver


def shown(driver: LiveDriver, text: str) -> None:
    """`text` arrives and the request that shows it is granted and accepted."""
    driver.text(text)
    driver.grant()
    driver.deliver()


def test_L4_messages_delivery_needs_no_final_edit() -> None:
    state = initial_state(StreamConfig(delivery="messages"))
    assert cancel_edits(state, buttons=True) == ()


def test_L4_no_message_yet_needs_no_final_edit() -> None:
    driver = manual()
    driver.text("Hello")  # a turn is awaited, nothing was sent
    assert cancel_edits(driver.state, buttons=False) == ()


def test_L4_the_open_message_loses_its_cursor() -> None:
    driver = manual()
    shown(driver, "Hello there")
    assert driver.channel == ["Hello there" + CURSOR]
    assert cancel_edits(driver.state, buttons=False) == (FinalEdit(0, "Hello there"),)


def test_L3_an_edit_in_flight_counts_as_shown_never_less() -> None:
    """The cancellation may cut off an edit that Discord applied: the final edit shows at
    least what that edit carried."""
    driver = manual()
    shown(driver, "Hello")
    driver.text(" world, and more")
    driver.grant()
    request = driver.in_flight
    assert isinstance(request, EditMessage)
    assert request.content == "Hello world, and more" + CURSOR
    assert cancel_edits(driver.state, buttons=False) == (FinalEdit(0, "Hello world, and more"),)


def test_L4_a_finishing_edit_cut_off_is_the_messages_final_content() -> None:
    """The edit that finishes a full message waits its turn when the caller cancels: the
    message gets that edit's content; the next message, never created, gets nothing."""
    driver = manual(max_message_length=200)
    shown(driver, "word " * 30)
    driver.text("more " * 20)
    driver.grant()
    finishing = driver.in_flight
    assert isinstance(finishing, EditMessage)
    assert not finishing.content.endswith(CURSOR)
    assert cancel_edits(driver.state, buttons=True) == (FinalEdit(0, finishing.content),)


def test_L4_text_that_arrived_but_was_not_shown_is_not_added() -> None:
    driver = manual()
    shown(driver, "Hello")
    driver.text(" unseen")  # waits for its turn
    assert cancel_edits(driver.state, buttons=False) == (FinalEdit(0, "Hello"),)


def test_L4_provisional_closers_stay_so_the_text_renders() -> None:
    driver = manual()
    shown(driver, "```py\nprint(1)\n")
    (edit,) = cancel_edits(driver.state, buttons=False)
    assert edit == FinalEdit(0, "```py\nprint(1)\n```")


def test_K2_a_finished_message_keeps_no_edit_unless_its_button_must_go() -> None:
    driver = manual()
    shown(driver, "Hello")
    driver.feed_end()  # the final edit goes out, in its turn
    driver.grant()
    request = driver.in_flight
    assert isinstance(request, EditMessage)
    assert not request.streaming
    driver.deliver()
    assert cancel_edits(driver.state, buttons=True) == ()


def test_K2_with_buttons_the_open_message_is_edited_even_when_nothing_else_changes() -> None:
    driver = manual()
    shown(driver, "Hello")
    content = cancel_edits(driver.state, buttons=True)
    assert content == cancel_edits(driver.state, buttons=False) == (FinalEdit(0, "Hello"),)


def test_L5_a_finished_message_whose_final_edit_waits_gets_it() -> None:
    """L2, L5: a finished message that already showed all it keeps lets the next message go
    first; cancelled then, it still gets its final edit, and so does the new open one."""
    driver = manual()
    prose = ("alpha beta gamma delta " * 80)[:1689].rstrip() + "\n"
    driver.text(prose + "```python\nprint(0)\n")
    driver.grant()
    driver.deliver()
    driver.text("".join(f"print({i})  # code line {i}\n" for i in range(1, 40)))
    driver.grant()
    create = driver.in_flight
    assert isinstance(create, SendMessage)
    driver.deliver()  # the next message exists; the first one's final edit waits
    edits = cancel_edits(driver.state, buttons=False)
    assert edits[0] == FinalEdit(0, prose.strip())
    assert edits[1].message == 1
    # The cursor stood on a line of its own after the provisional closing fence.
    assert edits[1].content == create.content.removesuffix("\n" + CURSOR.strip())
