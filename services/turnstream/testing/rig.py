"""A ready-made embedded session for tests: one loop, fakes everywhere.

Owns :func:`open_rig` and :class:`Rig`: a :class:`~turnstream.runtime.
LocalSession` over a :class:`~turnstream.testing.journal.FlakyJournal` and an
:class:`~turnstream.memory.InMemoryHub`, a :class:`~turnstream.testing.model.
ScriptedModel`, a deterministic clock and id source, and an
:class:`~turnstream.testing.recorder.EventRecorder` subscribed to everything
*before* the loop is created. Imports the runtime, the memory adapters and the
other fakes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from turnstream.content import Conversation
from turnstream.events import Agency, AnyEvent, EnduringEvent, LoopStarted, TokenDelta
from turnstream.ids import CommandId, LoopId
from turnstream.memory.hub import InMemoryHub
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.local_session import LocalSession
from turnstream.runtime.ports import AccessPolicy, Tool
from turnstream.runtime.session import Content
from turnstream.runtime.subscription import EventFilter
from turnstream.testing.clock import FixedClock, SequentialIds
from turnstream.testing.journal import FlakyJournal
from turnstream.testing.model import Script, ScriptedModel
from turnstream.testing.recorder import Described, EventRecorder
from turnstream.testing.tools import StaticAccessPolicy

__all__ = ["RECORDER_CAPACITY", "Rig", "open_rig"]

RECORDER_CAPACITY = 100_000


@dataclass(eq=False)
class Rig:
    """Handles on everything a runtime test needs."""

    session: LocalSession
    journal: FlakyJournal
    hub: InMemoryHub
    model: ScriptedModel
    recorder: EventRecorder
    clock: FixedClock
    ids: SequentialIds
    loop_id: LoopId

    async def submit(
        self,
        content: Content = "hi",
        *,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
    ) -> CommandId:
        """Submit to the rig's loop."""
        return await self.session.submit_to_loop(
            self.loop_id, content, no_fold=no_fold, agency=agency
        )

    async def idle(self) -> None:
        """Wait until the loop is parked."""
        await self.session.wait_idle(self.loop_id)

    @property
    def events(self) -> list[AnyEvent]:
        """Every event delivered since the subscription, LoopStarted first."""
        return self.recorder.events

    def after_start(self, *, deltas: bool = False) -> list[Described]:
        """Delivered events after LoopStarted, described (without deltas)."""
        skip: tuple[type, ...] = () if deltas else (TokenDelta,)
        return [
            d
            for d in self.recorder.described(skip=skip)
            if d[0] != LoopStarted.__name__
        ]

    def journal_events(self) -> tuple[EnduringEvent, ...]:
        """Every committed event of the loop."""
        return self.journal.events(self.loop_id)

    async def history(self) -> tuple[Conversation, ...]:
        """The loop's committed history."""
        return (await self.session.loop_state(self.loop_id)).messages


@asynccontextmanager
async def open_rig(
    *steps: Script,
    model: ScriptedModel | None = None,
    tools: Sequence[Tool] = (),
    config: LoopConfig | None = None,
    hooks: HookRunner | None = None,
    access_policy: AccessPolicy | None = None,
    journal: FlakyJournal | None = None,
    hub: InMemoryHub | None = None,
    ids: SequentialIds | None = None,
) -> AsyncIterator[Rig]:
    """Start a session with one loop; shut it down on exit.

    Without ``access_policy`` every tool call is approved (a
    :class:`StaticAccessPolicy`, so each gets its ``PermissionDecided``); pass
    :class:`~turnstream.runtime.NoAccessPolicy` to test a loop without one.
    """
    clock, ids = FixedClock(), ids or SequentialIds()
    journal = journal or FlakyJournal()
    hub = hub or InMemoryHub()
    model = model or ScriptedModel(steps)
    session = LocalSession(
        journal=journal,
        hub=hub,
        clock=clock,
        ids=ids,
        hooks=hooks,
        access_policy=access_policy or StaticAccessPolicy(),
    )
    recorder = EventRecorder(
        hub.subscribe(EventFilter.everything(), capacity=RECORDER_CAPACITY)
    )
    config = config or LoopConfig(model="scripted-model", tools=tuple(tools))
    async with session:
        loop_id = await session.create_loop(config, model)
        yield Rig(
            session=session,
            journal=journal,
            hub=hub,
            model=model,
            recorder=recorder,
            clock=clock,
            ids=ids,
            loop_id=loop_id,
        )
