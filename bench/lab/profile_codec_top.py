"""cProfile of the codec bench's events: the top functions by own time.

For each event of ``codec_bench.events()`` and each direction, runs
``marshal_*``/``unmarshal_*`` ``--number`` times under :mod:`cProfile` and
prints the ``--top`` functions by total own time (``tottime``), so a change to
the codec can show where the time went before and after::

    PYTHONPATH=services python bench/lab/profile_codec_top.py
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from codec_bench import events as codec_events
from turnstream.events import EventBase
from turnstream.wire import Codec, SchemaSet


def _top(fn: Callable[[], object], number: int, top: int) -> str:
    fn()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(number):
        fn()
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[start : start + top + 1])


def _calls(codec: Codec, event: EventBase) -> dict[str, Callable[[], object]]:
    if event.is_enduring():
        framed = codec.marshal_event(event)
        return {
            "encode": lambda: codec.marshal_event(event),
            "decode": lambda: codec.unmarshal_event(framed),
        }
    framed = codec.marshal_ephemeral(event)
    return {
        "encode": lambda: codec.marshal_ephemeral(event),
        "decode": lambda: codec.unmarshal_ephemeral(framed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args(argv)
    codec = Codec(SchemaSet.load())
    for name, event in codec_events().items():
        for op, fn in _calls(codec, event).items():
            print(f"== {name} {op} ({args.number} calls)")
            print(_top(fn, args.number, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
