"""Decoder threads take turns: at most the slots' count decode at once, process-wide, and a
decode stage decodes every packet inside a slot (docs/BENCHMARKS.md, "Where the cameras
stop": 32 decoder threads at once starved the event loop)."""

from __future__ import annotations

import threading

import pytest

from pipelines.channel import Channel
from pipelines.decode.picture import DecodedPicture
from pipelines.decode.slots import DecodeSlots, usable_cores
from pipelines.decode.stage import DecodeStage
from pipelines.frame import Frame
from pipelines.metrics import PipelineMetrics
from tests.support.fakes import FakeDecoder, FakeSource, run_source_stage


def test_a_third_decode_waits_until_one_of_two_slots_is_free():
    slots = DecodeSlots(2)
    entered = threading.Event()

    def third() -> None:
        with slots:
            entered.set()

    with slots, slots:
        waiting = threading.Thread(target=third)
        waiting.start()
        assert not entered.wait(0.2)  # both slots held: it cannot be in
    assert entered.wait(10)  # both given back: it gets one
    waiting.join()


def test_a_slot_given_back_goes_to_the_longest_waiter_not_to_the_thread_giving_it():
    slots = DecodeSlots(1)
    order: list[str] = []

    def waiter(name: str) -> None:
        with slots:
            order.append(name)

    slots.__enter__()
    threads = []
    for name in ("first", "second"):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        while len(slots._waiting) < len(threads):  # it is queued before the next one comes
            threading.Event().wait(0.001)
    slots.__exit__(None, None, None)
    with slots:  # at once again, as a decoder catching up would: after those who waited
        order.append("again")
    for t in threads:
        t.join()
    assert order == ["first", "second", "again"]


def test_slots_are_at_least_one_and_default_to_the_usable_cores():
    with pytest.raises(ValueError, match="decode slots must be >= 1"):
        DecodeSlots(0)
    assert usable_cores() >= 1


class CountingSlots(DecodeSlots):
    def __init__(self) -> None:
        super().__init__(1)
        self.taken = 0
        self.held = False

    def __enter__(self) -> CountingSlots:
        super().__enter__()
        self.taken += 1
        self.held = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.held = False
        super().__exit__(None, None, None)


class CheckingDecoder(FakeDecoder):
    """Decodes only inside a slot."""

    def __init__(self, slots: CountingSlots) -> None:
        super().__init__()
        self.slots = slots

    def decode(self, packet: int) -> list[DecodedPicture]:  # type: ignore[override]
        assert self.slots.held, "decoded outside a slot"
        return super().decode(packet)


def test_a_decode_stage_decodes_every_packet_in_a_slot():
    slots = CountingSlots()
    source = FakeSource("cam", 10)
    out: Channel[Frame] = Channel("decoded", 64)
    stage = DecodeStage(source, lambda s: CheckingDecoder(slots), out, PipelineMetrics(),
                        slots=slots)
    frames = run_source_stage(stage, out)
    assert [f.index for f in frames] == list(range(10))
    assert slots.taken == 10  # one a packet
