"""Grouped acknowledgements: one ACK per delay (or per GROUP_MAX ids), held while the
consumer is disconnected and handed back for the next subscribe."""

from __future__ import annotations

import asyncio

from pulsar_gateway.gateway.backend.wire import acks


def test_acks_are_grouped_held_and_bounded() -> None:
    async def scenario() -> None:
        sent: list[list[tuple[int, int]]] = []
        connected = [True]

        def send(entries: list[tuple[int, int]]) -> bool:
            if connected[0]:
                sent.append(entries)
            return connected[0]

        group = acks.AckGroup(send, delay=0.05)
        group.add([(1, 1)])
        group.add([(1, 2), (1, 3)])
        assert sent == []  # within the delay: nothing yet
        await asyncio.sleep(0.1)
        assert sent == [[(1, 1), (1, 2), (1, 3)]]  # one ACK for the three
        group.add([(2, i) for i in range(acks.GROUP_MAX)])
        assert len(sent) == 2 and len(sent[1]) == acks.GROUP_MAX  # at once when full
        connected[0] = False
        group.add([(3, 1)])
        group.flush()
        assert len(sent) == 2
        assert group.take_held() == [(3, 1)] and group.take_held() == []
        group.add([(4, i) for i in range(acks.MAX_HELD + 1)])
        assert group.take_held() == []  # more than the bound: not held
        immediate = acks.AckGroup(send, delay=0)
        connected[0] = True
        immediate.add([(5, 1)])
        assert sent[-1] == [(5, 1)]

    asyncio.run(scenario())
