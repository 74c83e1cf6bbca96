"""The per-chat update queues in front of python-telegram-bot's concurrency slots: one
chat's updates run one at a time in arrival order, holding no slot while they wait, and
other chats pass them."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from telegram import Chat, Message, Update

from bot.channels.telegram.delivery.chat_queues import ChatQueueProcessor, chat_key
from tests.waits import scaled

GUARD_S = 5.0  # only so that a broken queue fails the test instead of hanging it


def update(update_id: int, chat_id: int | None, thread_id: int | None = None) -> Update:
    if chat_id is None:
        return Update(update_id)
    chat = Chat(chat_id, Chat.PRIVATE if chat_id > 0 else Chat.SUPERGROUP)
    message = Message(
        update_id,
        datetime.now(UTC),
        chat,
        text=f"m{update_id}",
        message_thread_id=thread_id,
        is_topic_message=thread_id is not None,
    )
    return Update(update_id, message=message)


class Jobs:
    """Each job records when it starts and ends; it ends once its chat's gate opens."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.finished: list[int] = []
        self.gates: dict[int | None, asyncio.Event] = {}
        self.running: dict[int | None, int] = {}
        self.most_at_once: dict[int | None, int] = {}
        self._changed = asyncio.Event()

    def gate(self, chat: int | None) -> asyncio.Event:
        return self.gates.setdefault(chat, asyncio.Event())

    async def job(self, uid: int, chat: int | None) -> None:
        self.started.append(uid)
        self.running[chat] = self.running.get(chat, 0) + 1
        self.most_at_once[chat] = max(self.most_at_once.get(chat, 0), self.running[chat])
        self._notify()
        try:
            await self.gate(chat).wait()
        finally:
            self.running[chat] -= 1
        self.finished.append(uid)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(self, condition: Any) -> None:
        async def wait() -> None:
            while not condition():
                await self._changed.wait()

        await asyncio.wait_for(wait(), scaled(GUARD_S))


def submit(
    processor: ChatQueueProcessor, jobs: Jobs, uid: int, chat: int | None, thread: int | None = None
) -> asyncio.Task[None]:
    return asyncio.create_task(
        processor.process_in_order(update(uid, chat, thread), jobs.job(uid, chat))
    )


async def test_a_busy_chat_waits_in_its_queue_and_other_chats_pass_it() -> None:
    jobs = Jobs()
    async with ChatQueueProcessor(2) as processor:
        tasks = [submit(processor, jobs, uid, 1) for uid in range(1, 11)]
        tasks.append(submit(processor, jobs, 100, 2))
        await jobs.until(lambda: 100 in jobs.started)
        # chat 1's first update and chat 2's run; chat 1's nine others hold no slot
        assert sorted(jobs.started) == [1, 100]
        assert processor.current_concurrent_updates == 2
        assert processor.waiting == 9

        tasks.append(submit(processor, jobs, 200, 3))  # a third chat waits for a slot only
        jobs.gate(2).set()
        await jobs.until(lambda: 200 in jobs.started)
        jobs.gate(3).set()
        jobs.gate(1).set()
        await asyncio.wait_for(asyncio.gather(*tasks), scaled(GUARD_S))
    chat1 = [uid for uid in jobs.started if uid < 100]
    assert chat1 == list(range(1, 11))
    assert jobs.most_at_once[1] == 1
    assert processor.waiting == 0


async def test_forum_topics_are_separate_queues_and_chatless_updates_queue_nowhere() -> None:
    jobs = Jobs()
    async with ChatQueueProcessor(4) as processor:
        first = submit(processor, jobs, 1, -100, thread=7)
        second = submit(processor, jobs, 2, -100, thread=7)
        other_topic = submit(processor, jobs, 3, -100, thread=8)
        no_chat = submit(processor, jobs, 4, None)
        await jobs.until(lambda: {1, 3, 4} <= set(jobs.started))
        assert 2 not in jobs.started
        assert chat_key(update(9, None)) is None
        assert chat_key(update(9, -100, 7)) != chat_key(update(9, -100, 8))
        for gate in (jobs.gate(-100), jobs.gate(None)):
            gate.set()
        await asyncio.wait_for(asyncio.gather(first, second, other_topic, no_chat), scaled(GUARD_S))
    assert jobs.started.index(1) < jobs.started.index(2)


async def test_a_cancelled_waiter_leaves_the_queue_unstarted() -> None:
    jobs = Jobs()
    async with ChatQueueProcessor(2) as processor:
        head = submit(processor, jobs, 1, 5)
        await jobs.until(lambda: jobs.started == [1])
        job2: Coroutine[Any, Any, None] = jobs.job(2, 5)
        waiter = asyncio.create_task(processor.process_in_order(update(2, 5), job2))
        third = submit(processor, jobs, 3, 5)
        await asyncio.sleep(0)  # let both reach their place in the queue
        assert processor.waiting == 2
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert inspect.getcoroutinestate(job2) == inspect.CORO_CLOSED
        jobs.gate(5).set()
        await asyncio.wait_for(asyncio.gather(head, third), scaled(GUARD_S))
    assert jobs.started == [1, 3]
    assert processor.waiting == 0


async def test_a_cancelled_head_hands_the_turn_on() -> None:
    jobs = Jobs()
    async with ChatQueueProcessor(1) as processor:
        head = submit(processor, jobs, 1, 5)
        nxt = submit(processor, jobs, 2, 5)
        await jobs.until(lambda: jobs.started == [1])
        head.cancel()
        await asyncio.gather(head, return_exceptions=True)
        await jobs.until(lambda: jobs.started == [1, 2])
        assert processor.current_concurrent_updates == 1
        jobs.gate(5).set()
        await asyncio.wait_for(nxt, scaled(GUARD_S))
    assert jobs.finished == [2]


async def test_awaiting_slot_counts_updates_free_to_run_without_a_slot() -> None:
    jobs = Jobs()
    async with ChatQueueProcessor(1) as processor:
        tasks = [submit(processor, jobs, 1, 1), submit(processor, jobs, 2, 1)]
        await jobs.until(lambda: jobs.started == [1])
        assert processor.awaiting_slot == 0  # update 2 waits behind its own chat
        job3: Coroutine[Any, Any, None] = jobs.job(3, 3)
        cancelled = asyncio.create_task(processor.process_in_order(update(3, 3), job3))
        tasks += [submit(processor, jobs, 4, 4), submit(processor, jobs, 5, None)]
        await asyncio.sleep(0)
        assert processor.awaiting_slot == 3  # chats 3 and 4, and the chatless one
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert inspect.getcoroutinestate(job3) == inspect.CORO_CLOSED
        assert processor.awaiting_slot == 2
        for chat in (1, 4, None):
            jobs.gate(chat).set()
        await asyncio.wait_for(asyncio.gather(*tasks), scaled(GUARD_S))
    assert sorted(jobs.started) == [1, 2, 4, 5]
    assert processor.awaiting_slot == 0


async def test_process_update_called_directly_keeps_the_chat_order() -> None:
    # As python-telegram-bot's own update fetcher would call it (holding a slot).
    jobs = Jobs()
    async with ChatQueueProcessor(4) as processor:
        tasks = [
            asyncio.create_task(processor.process_update(update(uid, 5), jobs.job(uid, 5)))
            for uid in (1, 2, 3)
        ]
        await jobs.until(lambda: jobs.started == [1])
        assert processor.waiting == 2
        jobs.gate(5).set()
        await asyncio.wait_for(asyncio.gather(*tasks), scaled(GUARD_S))
    assert jobs.started == [1, 2, 3]
    assert jobs.most_at_once[5] == 1
