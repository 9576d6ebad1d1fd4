"""faust codecs over turnstream's wire codecs, registered by name.

Owns the three faust ``Codec`` subclasses the analytics app (and user
processors) use, and :func:`register_codecs`:

* ``turnstream_avro`` -- journal records (:data:`EVENTS_CODEC`): decodes with
  :meth:`turnstream.wire.codec.Codec.unmarshal_event`. A record that cannot be
  decoded becomes an :class:`Undecodable` marker instead of an exception, so a
  poison record is counted and skipped by the agent and never stops the
  stream (faust would otherwise re-raise the decode error inside the agent).
* ``turnstream_analytics_avro`` -- analytics snapshots (:data:`SNAPSHOT_CODEC`).
* ``turnstream_analytics_state`` -- the per-loop table values
  (:data:`STATE_CODEC`): compact JSON of
  :class:`~turnstream.analytics.aggregate.LoopStats`.

One of the modules allowed to import faust (with :mod:`.transport`,
:mod:`.app` and the examples); must not import aiokafka directly,
:mod:`turnstream.runtime` or :mod:`turnstream.kafka`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from faust.serializers import codecs as faust_codecs

from turnstream.analytics.aggregate import LoopStats
from turnstream.errors import ContractError
from turnstream.events import EnduringEvent, EventBase
from turnstream.wire.analytics_codec import (
    AnalyticsCodec,
    AnalyticsSnapshot,
    default_analytics_codec,
)
from turnstream.wire.codec import Codec as WireCodec
from turnstream.wire.codec import marshal_event, unmarshal_event

__all__ = [
    "EVENTS_CODEC",
    "SNAPSHOT_CODEC",
    "STATE_CODEC",
    "EventCodec",
    "LoopStatsValue",
    "SnapshotCodec",
    "StateCodec",
    "Undecodable",
    "register_codecs",
]

EVENTS_CODEC: Final = "turnstream_avro"
SNAPSHOT_CODEC: Final = "turnstream_analytics_avro"
STATE_CODEC: Final = "turnstream_analytics_state"


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What :class:`EventCodec` yields for a record it cannot decode.

    Attributes:
        kind: the error's stable kind (``"framing"``, ``"unsupported_schema"``…).
        reason: a data-free description (wire errors never echo payload bytes).
        size: the record's size in bytes.
    """

    kind: str
    reason: str
    size: int


class EventCodec(faust_codecs.Codec):
    """``turnstream_avro``: journal records <-> typed enduring events.

    Args:
        children: faust's codec chain (kept for :meth:`clone`).
        **kwargs: ``decode`` (bytes -> event) and ``encode`` (event -> bytes);
            they default to the process-default wire codec.
    """

    def __init__(self, children: tuple[Any, ...] | None = None, **kwargs: Any) -> None:
        super().__init__(children, **kwargs)
        self._decode: Callable[[bytes], EnduringEvent] | None = kwargs.get("decode")
        self._encode: Callable[[EventBase], bytes] | None = kwargs.get("encode")

    def _loads(self, s: bytes) -> EnduringEvent | Undecodable:
        try:
            if self._decode is None:
                return unmarshal_event(s)
            return self._decode(s)
        except ContractError as exc:
            # Every decode failure of the wire codec is a ContractError
            # (DecodeError and its refinements); the text carries no payload.
            return Undecodable(kind=exc.kind, reason=str(exc), size=len(s))

    def _dumps(self, s: Any) -> bytes:
        if not isinstance(s, EventBase):
            raise TypeError(f"{EVENTS_CODEC} encodes events, not {type(s).__name__}")
        if self._encode is None:
            return marshal_event(s)
        return self._encode(s)


class SnapshotCodec(faust_codecs.Codec):
    """``turnstream_analytics_avro``: analytics snapshots <-> Avro frames.

    Args:
        children: faust's codec chain (kept for :meth:`clone`).
        **kwargs: ``codec``, the :class:`AnalyticsCodec` to use (default: the
            process default).
    """

    def __init__(self, children: tuple[Any, ...] | None = None, **kwargs: Any) -> None:
        super().__init__(children, **kwargs)
        self._codec: AnalyticsCodec | None = kwargs.get("codec")

    def _wire(self) -> AnalyticsCodec:
        if self._codec is None:
            return default_analytics_codec()
        return self._codec

    def _loads(self, s: bytes) -> AnalyticsSnapshot:
        return self._wire().unmarshal_snapshot(s)

    def _dumps(self, s: Any) -> bytes:
        if not isinstance(s, AnalyticsSnapshot):
            raise TypeError(
                f"{SNAPSHOT_CODEC} encodes snapshots, not {type(s).__name__}"
            )
        return self._wire().marshal_snapshot(s)


class StateCodec(faust_codecs.Codec):
    """``turnstream_analytics_state``: :class:`LoopStats` <-> compact JSON."""

    def _loads(self, s: bytes) -> LoopStats:
        return LoopStats.from_dict(json.loads(s))

    def _dumps(self, s: Any) -> bytes:
        if not isinstance(s, LoopStats):
            raise TypeError(f"{STATE_CODEC} encodes LoopStats, not {type(s).__name__}")
        return json.dumps(s.to_dict(), separators=(",", ":")).encode()


class LoopStatsValue:
    """The loops table's ``value_type``: selects :class:`StateCodec` for faust.

    faust derives a table's (and its changelog's) serializer from the value
    type's ``_options.serializer`` and rebuilds values with ``from_data``;
    the codec already returns :class:`LoopStats`, so ``from_data`` passes it on.
    """

    class _options:  # the attribute name faust looks up
        serializer = STATE_CODEC

    @staticmethod
    def from_data(data: Any, preferred_type: Any = None) -> Any:
        """Return ``data`` unchanged (already a :class:`LoopStats`)."""
        return data


def register_codecs(
    wire: WireCodec | None = None, analytics: AnalyticsCodec | None = None
) -> None:
    """Register the three codecs with faust under their names.

    Faust's codec registry is process-wide: the last registration of a name
    wins. Call it before the app defines topics and tables.

    Args:
        wire: the journal codec; ``None`` uses the process-default wire codec.
        analytics: the snapshot codec; ``None`` uses the process default.
    """
    if wire is None:
        faust_codecs.register(EVENTS_CODEC, EventCodec())
    else:
        faust_codecs.register(
            EVENTS_CODEC,
            EventCodec(decode=wire.unmarshal_event, encode=wire.marshal_event),
        )
    faust_codecs.register(SNAPSHOT_CODEC, SnapshotCodec(codec=analytics))
    faust_codecs.register(STATE_CODEC, StateCodec())
