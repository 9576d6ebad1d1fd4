"""A downstream journal consumer as a child process (for the kill -9 test).

``python -m tests.support.journal_child BOOTSTRAP PREFIX GROUP OUT [DELAY]`` runs a
:class:`~turnstream.kafka.client.JournalConsumer` on the events topic of the topic
set under ``PREFIX`` and appends ``<event id> <partition> <offset>`` for every
handled event to ``OUT`` -- with one unbuffered ``write`` per event, before the
handler returns, so a SIGKILL loses nothing the consumer committed. ``DELAY``
seconds of sleep per event keep the stream going long enough to be killed in it.
"""

from __future__ import annotations

import asyncio
import os
import sys

from turnstream.kafka.client import JournalConsumer, JournalRecord
from turnstream.kafka.topology import TopicNames


async def main(bootstrap: str, prefix: str, group: str, out: str, delay: float) -> None:
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def handle(record: JournalRecord) -> None:
        line = f"{record.event.header.event_id} {record.partition} {record.offset}\n"
        os.write(fd, line.encode())
        if delay:
            await asyncio.sleep(delay)

    consumer = JournalConsumer.connect(
        bootstrap,
        handle,
        group_id=group,
        topics=TopicNames.with_affixes(prefix=prefix),
        max_records=50,
    )
    print("journal consumer running", file=sys.stderr, flush=True)
    await consumer.run()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(*args[:4], float(args[4]) if len(args) > 4 else 0.0))
