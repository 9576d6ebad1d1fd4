"""Reusable test helpers: waiting without sleeps and isolated Kafka names.

- ``eventually.assert_eventually``: retry an assertion until it holds or times out.
- ``kafka``: ``unique_name``, ``KafkaNames`` (per-test topic/group/transactional ids),
  and small admin and consume helpers for integration tests.

Generic on purpose: nothing here knows turnstream's events or topics.
"""

from tests.support.eventually import assert_eventually
from tests.support.kafka import KafkaNames, unique_name

__all__ = ["KafkaNames", "assert_eventually", "unique_name"]
