"""service.handover: engine events to another thread in put order, tokens woken per batch."""

from __future__ import annotations

import threading

from turbospark_app.service.events import Started, Token
from turbospark_app.service.handover import Handover


def test_everything_put_is_delivered_once_in_order_with_one_wake_per_token_batch() -> None:
    delivered: list[object] = []
    wakes: list[bool] = []
    pending = threading.Event()
    handover: Handover[object] = Handover(lambda later: (wakes.append(later), pending.set()), delivered.append)
    items = [Started(1, "c", 3)] + [Token(1, "c", i, i, "x") for i in range(5000)]
    producer = threading.Thread(target=lambda: [handover.put(item) for item in items])
    producer.start()
    while producer.is_alive() or pending.is_set():  # a consumer draining whenever it is woken
        if pending.wait(0.001):
            pending.clear()
            handover.drain()
    handover.drain()
    assert delivered == items
    assert wakes[0] is False  # Started: at once
    assert all(wakes[1:]) and len(wakes) < len(items)  # tokens: one wake per batch


def test_an_event_after_tokens_wakes_at_once_and_a_drain_reopens_the_batch() -> None:
    delivered: list[object] = []
    wakes: list[bool] = []
    handover: Handover[object] = Handover(wakes.append, delivered.append)
    handover.put(Token(1, "c", 0, 0, "a"))
    handover.put(Token(1, "c", 1, 1, "b"))
    assert wakes == [True]  # the second token joined the open batch
    handover.put(Started(2, "d", 1))
    assert wakes == [True, False]
    handover.drain()
    assert [getattr(e, "index", None) for e in delivered] == [0, 1, None]
    handover.put(Token(1, "c", 2, 2, "c"))
    assert wakes == [True, False, True]  # after a drain, the next token opens a new batch
    handover.drain()
    handover.drain()  # nothing waiting: a no-op
    assert len(delivered) == 4


def test_a_batch_waits_only_when_the_last_drain_was_recent() -> None:
    """Fast streams are drained at most every COALESCE_S; a slow or paced one at once."""
    from turbospark_app.service.handover import COALESCE_S

    now = [100.0]
    handover: Handover[object] = Handover(lambda later: None, lambda item: None, clock=lambda: now[0])
    assert handover.delay() == 0.0  # never drained: at once
    handover.drain()
    assert abs(handover.delay() - COALESCE_S) < 1e-9  # just drained: wait a frame
    now[0] += COALESCE_S / 2
    assert abs(handover.delay() - COALESCE_S / 2) < 1e-9
    now[0] += COALESCE_S
    assert handover.delay() == 0.0  # a paced stream's next token shows when it comes


def test_a_failing_delivery_does_not_strand_the_events_behind_it(caplog) -> None:
    delivered: list[object] = []
    wakes: list[bool] = []

    def deliver(item: object) -> None:
        if getattr(item, "index", None) == 1:
            raise RuntimeError("a listener's bug")
        delivered.append(item)

    handover: Handover[object] = Handover(wakes.append, deliver)
    for i in range(3):
        handover.put(Token(1, "c", i, i, "x"))
    handover.drain()
    assert [e.index for e in delivered] == [0, 2] and "delivering" in caplog.text
    handover.put(Token(1, "c", 3, 3, "y"))
    assert wakes == [True, True]  # the batch was closed: the next token wakes the consumer again
