"""The codec's accelerators: speed only, never meaning.

Everything here writes and reads the same bytes and values as the generic
path of :mod:`turnstream.wire` (``to_record``/``from_record`` and fastavro),
which stays the authority for every error and every older schema. Each
accelerator declines (returns None) whatever it does not fully expect, and
the codec falls back to the generic path. ``TURNSTREAM_CODEC=generic``
switches them all off (:mod:`~turnstream.wire._accel.switch`);
:attr:`turnstream.wire.Codec.path` names the path a codec runs.

Contents:

* :mod:`~turnstream.wire._accel.switch` -- the one setting
  (``TURNSTREAM_CODEC``: ``auto`` | ``generated`` | ``generic``).
* :mod:`~turnstream.wire._accel.compiled` -- a schema-compiled Avro writer
  (fastavro's ``schemaless_writer`` bytes without its per-datum schema walk).
* :mod:`~turnstream.wire._accel.fast_path` -- the event topics' generated
  path: writers and a reader generated from the schema
  (:mod:`~turnstream.wire._accel.event_writer`,
  :mod:`~turnstream.wire._accel.event_reader`,
  :mod:`~turnstream.wire._accel.codegen`) that go model ↔ bytes directly.
* :mod:`~turnstream.wire._accel.native_plan` + ``_native.c`` -- the same
  mapping in C, in front of the generated path where the extension is built
  (:func:`~turnstream.wire.native_available`; the package's build hook,
  ``hatch_build.py``, compiles it when a C compiler is present): plans made
  from the schema and the models, walked by a small interpreter.
* :mod:`~turnstream.wire._accel.state_writer` -- loop-state snapshots that
  encode each history message once (:class:`~turnstream.wire.EncodedHistory`,
  one memo per loop).
"""
