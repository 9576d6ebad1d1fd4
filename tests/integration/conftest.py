"""Fixtures of the integration lane: a private broker (tests.support.private_broker)."""

from tests.support.private_broker import own_broker

__all__ = ["own_broker"]
