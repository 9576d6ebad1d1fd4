"""Where the Avro codec's encode time goes, and whether fastavro runs as C.

For each record the turn path writes -- a TokenDelta, TurnStarted, StepDone,
TurnDone, LoopIdle and loop-state snapshots after 5 and 50 turns -- measures
the median process-CPU time per call (process time, not wall time, so other
processes on a shared box disturb it less) of:

* ``codec``: the full ``marshal_*`` call;
* ``to_record``: the mapping from the pydantic value to the Avro dict;
* ``fastavro``: ``schemaless_writer`` on that prebuilt dict (the codec's
  parsed schema, ``strict=True``);
* ``fastavro_tagged``: the same dict with *every* union value written in
  tuple notation, the floor a mapping that tags optional fields could reach
  (measured interleaved with ``fastavro``, so their ratio is steady).

It also records the facts behind them: whether ``fastavro._write`` is the
compiled extension, whether the codec's schema is pre-parsed (so
``schemaless_writer`` does not parse per call), and the per-call floor
(writing one ``long``). Run it against a scratch copy of the package to
measure a proposed change::

    python bench/lab/profile_codec.py --label before
    PYTHONPATH=/tmp/scratch/services python bench/lab/profile_codec.py --label after
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
from fastavro import schemaless_writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import turnstream
from codec_bench import events as codec_events
from restore_bench import journal_events
from turnstream.events import EventBase, LoopIdle, TurnStarted
from turnstream.runtime.fold import fold_loop
from turnstream.state import LoopState
from turnstream.wire import Codec, SchemaSet, Topic, to_record

Schema = Any


def cpu_us(fn: Callable[[], object], number: int, reps: int) -> float:
    """Median process-CPU microseconds per call over ``reps`` repetitions."""
    for _ in range(max(number // 10, 10)):
        fn()
    samples = []
    for _ in range(reps):
        started = time.process_time()
        for _ in range(number):
            fn()
        samples.append((time.process_time() - started) / number * 1e6)
    return round(statistics.median(samples), 2)


def pair_us(
    a: Callable[[], object], b: Callable[[], object], number: int, reps: int
) -> tuple[float, float]:
    """Median process-CPU µs per call of ``a`` and ``b``, measured interleaved.

    Alternating the repetitions (a, b, a, b, ...) exposes both to the same
    drift of a shared machine, so their ratio is steadier than either number.
    """
    for fn in (a, b):
        for _ in range(max(number // 10, 10)):
            fn()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(reps):
        for fn, out in ((a, samples[0]), (b, samples[1])):
            started = time.process_time()
            for _ in range(number):
                fn()
            out.append((time.process_time() - started) / number * 1e6)
    return (
        round(statistics.median(samples[0]), 2),
        round(statistics.median(samples[1]), 2),
    )


def _branch_name(schema: Schema) -> str:
    if isinstance(schema, str):
        return schema
    kind = str(schema["type"])
    return str(schema["name"]) if kind in ("record", "enum", "fixed") else kind


def tag_unions(datum: Any, schema: Schema, named: dict[str, Schema]) -> Any:  # noqa: PLR0911
    """``datum`` with every union value in tuple notation (same bytes)."""
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, list):
        if isinstance(datum, tuple):
            name, inner = datum
            branch = next(c for c in schema if _branch_name(c) == name)
            return (name, tag_unions(inner, branch, named))
        if datum is None:
            return ("null", None)
        (branch,) = [c for c in schema if c != "null"]
        return (_branch_name(branch), tag_unions(datum, branch, named))
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return {
                f["name"]: tag_unions(datum[f["name"]], f["type"], named)
                for f in schema["fields"]
            }
        if kind == "array":
            return [tag_unions(x, schema["items"], named) for x in datum]
        if kind == "map":
            return {k: tag_unions(v, schema["values"], named) for k, v in datum.items()}
    return datum


def state_after(turns: int) -> LoopState:
    """The folded state of a loop after ``turns`` text turns."""
    session, loop = uuid.uuid4(), uuid.uuid4()
    return fold_loop(journal_events(turns, session, loop))


def values() -> dict[str, EventBase | LoopState]:
    """The benchmarked values."""
    base = codec_events()
    history = journal_events(1, uuid.uuid4(), uuid.uuid4())
    started = next(e for e in history if isinstance(e, TurnStarted))
    idle = next(e for e in history if isinstance(e, LoopIdle))
    return {
        "TokenDelta": base["TokenDelta"],
        "TurnStarted": started,
        "StepDone": base["StepDone"],
        "TurnDone": base["TurnDone"],
        "LoopIdle": idle,
        "LoopState(5 turns)": state_after(5),
        "LoopState(50 turns)": state_after(50),
    }


def _write(schema: Schema, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, record, strict=True)
    return out.getvalue()


def _callables(
    codec: Codec, value: EventBase | LoopState
) -> tuple[Topic, Callable[[], bytes], Callable[[], object]]:
    """The value's topic, its full encode, and its ``to_record`` mapping."""
    if isinstance(value, LoopState):
        state = value
        return (
            Topic.LOOPS,
            lambda: codec.marshal_state(state),
            lambda: to_record.loop_state_record(state),
        )
    event = value
    enduring = event.is_enduring()
    marshal = codec.marshal_event if enduring else codec.marshal_ephemeral
    return (
        Topic.EVENTS if enduring else Topic.DELTAS,
        lambda: marshal(event),
        lambda: to_record.event_record(event),  # type: ignore[arg-type]
    )


def _writer(schema: Schema, record: Any) -> Callable[[], bytes]:
    return lambda: _write(schema, record)


def measure(number: int, reps: int) -> dict[str, Any]:
    """Every case; the result document."""
    codec = Codec(SchemaSet.load())
    rows = []
    for name, value in values().items():
        topic, encode, mapping = _callables(codec, value)
        schema: Schema = codec.schemas.writer_schema(topic).parsed
        record = mapping()
        tagged = tag_unions(record, schema, schema["__named_schemas"])
        assert _write(schema, record) == _write(schema, tagged)
        size = len(encode())
        n = max(number // max(1, size // 2000), 50)
        rows.append(
            {
                "value": name,
                "bytes": size,
                "codec_us": cpu_us(encode, n, reps),
                "to_record_us": cpu_us(mapping, n, reps),
                **dict(
                    zip(
                        ("fastavro_us", "fastavro_tagged_us"),
                        pair_us(
                            _writer(schema, record), _writer(schema, tagged), n, reps
                        ),
                        strict=True,
                    )
                ),
            }
        )
    events_schema = codec.schemas.writer_schema(Topic.EVENTS).parsed
    try:
        import fastavro._write as compiled

        extension = str(getattr(compiled, "__file__", ""))
    except ImportError:
        extension = ""
    facts = {
        "fastavro": fastavro.__version__,
        "fastavro_write_module": schemaless_writer.__module__,
        "fastavro_write_extension": extension,
        "c_extension_in_use": extension.endswith(".so")
        and type(schemaless_writer).__name__ == "cython_function_or_method",
        "schema_pre_parsed": "__fastavro_parsed" in events_schema,
        "named_schemas_cached": "__named_schemas" in events_schema,
        "floor_one_long_us": cpu_us(lambda: _write("long", 5), number, reps),
        "record_of_8_fields_us": field_costs(number, reps),
    }
    return {"facts": facts, "rows": rows}


def field_costs(number: int, reps: int) -> dict[str, float]:
    """fastavro CPU µs for one record of 8 fields of each kind (strict=True)."""
    uuid_type = {"type": "string", "logicalType": "uuid"}
    kinds: dict[str, Any] = {
        "string": "string",
        "long": "long",
        "uuid (logical string)": uuid_type,
        "[null, string]": ["null", "string"],
        "[null, uuid]": ["null", uuid_type],
        "[null, uuid] tagged": ["null", uuid_type],
    }
    text = "7b2f9c1e-0000-4000-8000-000000000001"
    out = {}
    for i, (label, field_type) in enumerate(kinds.items()):
        schema = fastavro.parse_schema(
            {
                "type": "record",
                "name": f"Probe{i}",
                "fields": [{"name": f"f{n}", "type": field_type} for n in range(8)],
            }
        )
        value: Any = 12345 if label == "long" else text
        if label.endswith("tagged"):
            value = ("string", text)
        record = {f"f{n}": value for n in range(8)}
        out[label] = cpu_us(lambda s=schema, r=record: _write(s, r), number, reps)  # type: ignore[misc]
    return out


def table(doc: dict[str, Any]) -> str:
    """Rows as a fixed-width table."""
    head = ("value", "bytes", "codec", "to_record", "fastavro", "tagged")
    lines = ["{:<20} {:>7} {:>9} {:>10} {:>9} {:>9}  (µs CPU)".format(*head)]
    for r in doc["rows"]:
        lines.append(
            f"{r['value']:<20} {r['bytes']:>7} {r['codec_us']:>9.1f} "
            f"{r['to_record_us']:>10.1f} {r['fastavro_us']:>9.1f} "
            f"{r['fastavro_tagged_us']:>9.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--label", default="current")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    doc = measure(args.number, args.reps)
    doc["label"] = args.label
    doc["package"] = str(Path(turnstream.__file__).resolve().parent)
    print(json.dumps(doc["facts"], indent=2))
    print(table(doc))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
