import asyncio

import pytest

from pipelines.channel import Channel
from pipelines.errors import ChannelClosed


def run(coro):
    return asyncio.run(coro)


def test_block_policy_waits_for_room_and_keeps_order():
    async def main():
        ch: Channel[int] = Channel("c", 2)
        got = []

        async def consume():
            await asyncio.sleep(0.05)
            while True:
                try:
                    got.append(await ch.get())
                except ChannelClosed:
                    return

        consumer = asyncio.create_task(consume())
        for i in range(10):
            await ch.put(i)
            assert len(ch) <= 2
        ch.close()
        await consumer
        return got, ch.drops

    got, drops = run(main())
    assert got == list(range(10))
    assert sum(drops.values()) == 0


def test_drop_oldest_evicts_and_counts_each_drop():
    dropped = []

    async def main():
        ch: Channel[int] = Channel("c", 3, "drop_oldest",
                                   on_drop=lambda i, c: dropped.append((i, c)))
        for i in range(10):
            await ch.put(i)
        ch.close()
        return [await ch.get() for _ in range(3)], ch

    kept, ch = run(main())
    assert kept == [7, 8, 9]
    assert dropped == [(i, "dropped_full") for i in range(7)]
    assert ch.drops["dropped_full"] == 7


def test_get_on_closed_and_drained_raises_and_put_on_closed_raises():
    async def main():
        ch: Channel[int] = Channel("c", 1)
        await ch.put(1)
        ch.close()
        assert await ch.get() == 1
        with pytest.raises(ChannelClosed):
            await ch.get()
        with pytest.raises(ChannelClosed):
            await ch.put(2)

    run(main())


def test_close_wakes_a_waiting_consumer():
    async def main():
        ch: Channel[int] = Channel("c", 1)
        waiter = asyncio.create_task(ch.get())
        await asyncio.sleep(0.01)
        ch.close()
        with pytest.raises(ChannelClosed):
            await asyncio.wait_for(waiter, 1.0)

    run(main())


def test_channel_with_several_producers_closes_after_the_last():
    async def main():
        ch: Channel[int] = Channel("c", 4, producers=2)
        ch.close()
        assert not ch.closed
        ch.close()
        assert ch.closed

    run(main())


def test_get_batch_takes_what_arrives_within_the_timeout():
    async def main():
        ch: Channel[int] = Channel("c", 16)

        async def produce():
            for i in range(3):
                await ch.put(i)
            await asyncio.sleep(0.3)  # well past the timeout
            await ch.put(3)
            ch.close()

        producer = asyncio.create_task(produce())
        first = await ch.get_batch(8, timeout_s=0.05)
        second = await ch.get_batch(8, timeout_s=0.05)
        await producer
        with pytest.raises(ChannelClosed):
            await ch.get_batch(8, timeout_s=0.05)
        return [i for i, _ in first], [i for i, _ in second]

    assert run(main()) == ([0, 1, 2], [3])


def test_get_batch_stops_at_max_items():
    async def main():
        ch: Channel[int] = Channel("c", 16)
        for i in range(10):
            await ch.put(i)
        return [i for i, _ in await ch.get_batch(4, timeout_s=1.0)]

    assert run(main()) == [0, 1, 2, 3]


@pytest.mark.parametrize("kwargs, message", [
    ({"capacity": 0}, "capacity"),
    ({"capacity": 2, "policy": "drop_newest"}, "policy"),
    ({"capacity": 2, "producers": 0}, "producers"),
])
def test_bad_arguments_are_refused_with_the_name_of_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Channel("c", **kwargs)


def test_waits_are_measured():
    async def main():
        ch: Channel[int] = Channel("c", 2)
        await ch.put(1)
        await asyncio.sleep(0.05)
        return await ch.get_timed()

    item, waited = run(main())
    assert item == 1 and waited >= 0.04


def test_put_many_keeps_order_and_capacity_and_wakes_the_consumer_once_per_call():
    async def main():
        ch: Channel[int] = Channel("c", 3)
        takes = []

        async def consume():
            while True:
                try:
                    takes.append([item for item, _ in await ch.get_batch(10, 0.0)])
                except ChannelClosed:
                    return

        consumer = asyncio.create_task(consume())
        await ch.put_many([0, 1])  # room for both: one take of both
        await asyncio.sleep(0.01)
        await ch.put_many([2, 3, 4, 5, 6])  # waits for room twice, never over capacity
        assert len(ch) <= 3
        await ch.put_many([])
        ch.close()
        await consumer
        return takes

    takes = run(main())
    assert [i for take in takes for i in take] == list(range(7))
    assert takes[0] == [0, 1]
    assert all(len(take) <= 3 for take in takes)


def test_put_many_under_drop_oldest_counts_each_eviction():
    dropped = []

    async def main():
        ch: Channel[int] = Channel("c", 2, "drop_oldest",
                                   on_drop=lambda i, c: dropped.append(i))
        await ch.put_many([0, 1, 2, 3, 4])
        ch.close()
        return [item for item, _ in await ch.get_batch(5, 0.0)]

    assert run(main()) == [3, 4]
    assert dropped == [0, 1, 2]
