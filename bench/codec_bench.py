"""Codec throughput: our framed Avro codec vs pydantic JSON, per event type.

Measures encode and decode of three realistic events -- a TokenDelta (the
hot live path), a StepDone with a tool call and its result, and a TurnDone --
with ``time.perf_counter``: a warm-up, then several repetitions of a timed
loop, the implementations taking turns repetition by repetition; the table
reports the median repetition (and the best) as µs/event and events/s, the
encoded size, and the median paired ratio to pydantic JSON (``÷json``, above
1 is faster), which the turn-taking keeps steady on a shared machine. Rows:

* ``avro codec``: ``marshal_event``/``unmarshal_event`` (``*_ephemeral`` for
  the TokenDelta) -- the codec end to end (fast path, framing, validation),
  on its native (C) path where built (``environment.native`` says);
* ``avro codec (py)``: the same codec on its Python paths only
  (``Codec(..., native=False)``), the fallback where no compiler is;
* ``avro body only``: fastavro's schemaless writer/reader on a prebuilt
  record, i.e. the floor under the codec's own mapping and validation;
* ``pydantic json``: ``model_dump_json`` / ``model_validate_json``.

Usage::

    python bench/codec_bench.py              # writes bench/results/codec.json
    python bench/codec_bench.py --quick      # fewer iterations, no file
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import fastavro
import pydantic

from turnstream.content import (
    AIMessage,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
)
from turnstream.events import EventBase, Header, StepDone, TokenDelta, TurnDone
from turnstream.wire import Codec, SchemaSet, Topic, native_available, to_record
from turnstream.wire.framing import HEADER_SIZE

RESULTS = Path(__file__).resolve().parent / "results" / "codec.json"


def _id(n: int) -> UUID:
    return UUID(f"7b2f9c1e-0000-4000-8000-{n:012x}")


AT = datetime(2026, 7, 8, 12, 0, 0, 123456, tzinfo=UTC)
COORDS = {"session_id": _id(1), "loop_id": _id(2), "turn_id": _id(3)}


def events() -> dict[str, EventBase]:
    """The benchmarked events, sized like real traffic."""
    step_header = Header(event_id=_id(10), step_id=_id(4), created_at=AT, **COORDS)
    usage = Usage(
        input_tokens=18_234,
        output_tokens=412,
        cache_read_tokens=16_000,
        cache_creation_tokens=1_024,
        reasoning_tokens=256,
    )
    tool_output = "\n".join(
        f"src/turnstream/module_{i:02d}.py  {i * 137} bytes" for i in range(24)
    )
    step = StepDone(
        header=step_header,
        messages=(
            AIMessage(
                blocks=(
                    ThinkingBlock(
                        thinking="The user wants the source files; list them first. "
                        * 3,
                        signature="EqQBCkgIARABGAIiQL" * 8,
                        signature_format="anthropic",
                    ),
                    TextBlock(text="I'll list the files in the source directory."),
                    ToolUseBlock(
                        id="toolu_01A09q90qw90lq917835lq9",
                        name="list_files",
                        input='{"path": "src/turnstream", "recursive": true}',
                    ),
                ),
                usage=usage,
            ),
            ToolResultMessage(
                tool_use_id="toolu_01A09q90qw90lq917835lq9",
                blocks=(
                    ToolResultBlock(
                        tool_use_id="toolu_01A09q90qw90lq917835lq9",
                        content=(TextBlock(text=tool_output),),
                    ),
                ),
            ),
        ),
    )
    done = TurnDone(
        header=Header(event_id=_id(11), created_at=AT, **COORDS),
        turn_index=7,
        message=AIMessage(
            blocks=(
                TextBlock(
                    text="There are 24 modules under src/turnstream; the largest is "
                    "module_23.py (3151 bytes). " * 4
                ),
            ),
            usage=Usage(input_tokens=18_900, output_tokens=120),
        ),
        usage=usage,
    )
    delta = TokenDelta(
        header=Header(step_id=_id(4), **COORDS),
        turn_index=7,
        chunk=TextChunk(text=" the largest"),
    )
    return {"TokenDelta": delta, "StepDone": step, "TurnDone": done}


def _time(fn: Callable[[], object], number: int, reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - started) / number)
    return samples


def _cases(
    codec: Codec, python: Codec, event: EventBase
) -> dict[str, tuple[Callable[[], object], Callable[[], object], int]]:
    enduring = event.is_enduring()
    encode = codec.marshal_event if enduring else codec.marshal_ephemeral
    decode = codec.unmarshal_event if enduring else codec.unmarshal_ephemeral
    py_encode = python.marshal_event if enduring else python.marshal_ephemeral
    py_decode = python.unmarshal_event if enduring else python.unmarshal_ephemeral
    framed = encode(event)
    assert py_encode(event) == framed, "the two paths disagree"
    topic = Topic.EVENTS if enduring else Topic.DELTAS
    schema = codec.schemas.writer_schema(topic).parsed
    record = to_record.event_record(event)  # type: ignore[arg-type]
    body = framed[HEADER_SIZE:]

    def body_write() -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, record, strict=True)
        return out.getvalue()

    def body_read() -> Any:
        return fastavro.schemaless_reader(
            io.BytesIO(body),
            schema,
            None,
            return_record_name=True,
            return_record_name_override=True,
        )

    model = type(event)
    as_json = event.model_dump_json().encode()
    return {
        "avro codec": (lambda: encode(event), lambda: decode(framed), len(framed)),
        "avro codec (py)": (
            lambda: py_encode(event),
            lambda: py_decode(framed),
            len(framed),
        ),
        "avro body only": (body_write, body_read, len(body)),
        "pydantic json": (
            event.model_dump_json,
            lambda: model.model_validate_json(as_json),
            len(as_json),
        ),
    }


def run(number: int, reps: int, warmup: int) -> dict[str, Any]:
    """Run every case; return the result document.

    For each event and direction the implementations take turns, one timed
    repetition each, so all of them see the same drift of a shared machine;
    ``vs_pydantic_json`` is the median over repetitions of the paired ratio
    (pydantic JSON time / this implementation's time, above 1 is faster).
    """
    schemas = SchemaSet.load()
    codec, python = Codec(schemas), Codec(schemas, native=False)
    rows = []
    for name, event in events().items():
        cases = _cases(codec, python, event)
        for op in ("encode", "decode"):
            fns = {
                impl: (enc if op == "encode" else dec)
                for impl, (enc, dec, _) in cases.items()
            }
            samples: dict[str, list[float]] = {impl: [] for impl in fns}
            for fn in fns.values():
                _time(fn, 1, 0, warmup)
            for _ in range(reps):
                for impl, fn in fns.items():
                    samples[impl] += _time(fn, number, 1, 0)
            json_samples = samples["pydantic json"]
            for impl, got in samples.items():
                median = statistics.median(got)
                paired = [j / c for j, c in zip(json_samples, got, strict=True)]
                rows.append(
                    {
                        "event": name,
                        "impl": impl,
                        "op": op,
                        "bytes": cases[impl][2],
                        "us_per_event": round(median * 1e6, 2),
                        "us_per_event_best": round(min(got) * 1e6, 2),
                        "events_per_s": round(1 / median),
                        "vs_pydantic_json": round(statistics.median(paired), 2),
                    }
                )
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "method": {
            "timer": "time.perf_counter",
            "iterations_per_repetition": number,
            "repetitions": reps,
            "warmup_iterations": warmup,
            "statistic": "median repetition (best also given)",
            "interleaved": "implementations alternate, one repetition each",
        },
        "environment": {
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "fastavro": fastavro.__version__,
            "pydantic": pydantic.VERSION,
            "native": native_available(),
        },
        "results": rows,
    }


def table(doc: dict[str, Any]) -> str:
    """The results as a fixed-width table."""
    head = ("event", "impl", "op", "bytes", "µs/event", "best", "events/s", "÷json")
    lines = ["{:<11} {:<16} {:<7} {:>6} {:>9} {:>8} {:>10} {:>6}".format(*head)]
    for r in doc["results"]:
        lines.append(
            f"{r['event']:<11} {r['impl']:<16} {r['op']:<7} {r['bytes']:>6} "
            f"{r['us_per_event']:>9.2f} {r['us_per_event_best']:>8.2f} "
            f"{r['events_per_s']:>10,} {r['vs_pydantic_json']:>6.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--number", type=int, default=5000, help="iterations per repetition"
    )
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions")
    parser.add_argument("--warmup", type=int, default=1000, help="warm-up iterations")
    parser.add_argument(
        "--quick", action="store_true", help="short run, nothing written"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.number, args.reps, args.warmup = 500, 3, 100
    doc = run(args.number, args.reps, args.warmup)
    print(table(doc))
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
