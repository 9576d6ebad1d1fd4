"""Where the codec's native (C) path spends its time: ``perf`` top symbols per row.

cProfile sees one C call per event on the native path (``_native.write`` /
``_native.read``), so this samples the process with Linux ``perf`` instead:
for each event of ``codec_bench.events()`` and each direction, a child process
runs ``marshal_*``/``unmarshal_*`` ``--number`` times under ``perf record``,
and the ``--top`` symbols by own (self) samples are printed, with the share of
the row's samples that fell in CPython's object machinery: allocator,
dict/set and attribute lookups, dealloc, gc (reading the models' fields on
encode; building and freeing them on decode)::

    python bench/lab/profile_codec_native.py  # → lab/out/profile_codec_native.txt
    python bench/lab/profile_codec_native.py --number 200000 --top 8

Needs ``perf`` (``linux-perf``) and the built extension (``make native``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from _support import LAB_OUT_DIR, ROOT, now_iso
from turnstream.wire import native_available

OUT = LAB_OUT_DIR / "profile_codec_native.txt"

_CHILD = """
import sys
sys.path.insert(0, {bench!r})
from codec_bench import events
from turnstream.wire import Codec, SchemaSet
codec = Codec(SchemaSet.load())
event = events()[{name!r}]
enduring = event.is_enduring()
if {op!r} == "encode":
    fn = codec.marshal_event if enduring else codec.marshal_ephemeral
    arg = event
else:
    fn = codec.unmarshal_event if enduring else codec.unmarshal_ephemeral
    arg = (codec.marshal_event if enduring else codec.marshal_ephemeral)(event)
for _ in range({number}):
    fn(arg)
"""

# Symbols that are the cost of making and freeing Python objects.
_OBJECT_WORK = (
    "Malloc",
    "Free",
    "dealloc",
    "Alloc",
    "dict",
    "set_",
    "SetAttr",
    "InstanceAttribute",
    "keys",
    "unicodekeys",
    "gc_",
    "GC_",
    "_PyType_Lookup",
    "NewReference",
)


def _row(name: str, op: str, number: int, top: int) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        code = _CHILD.format(
            bench=str(Path(__file__).resolve().parents[1]),
            name=name,
            op=op,
            number=number,
        )
        subprocess.run(
            ["perf", "record", "-q", "-o", str(data), sys.executable, "-c", code],
            check=True,
            capture_output=True,
            timeout=600,
            cwd=ROOT,
        )
        report = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(data),
                "--no-children",
                "--stdio",
                "--sort",
                "dso,symbol",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        ).stdout
    rows = []
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].endswith("%"):
            share = float(parts[0].rstrip("%"))
            dso = parts[1]
            symbol = " ".join(p for p in parts[3:] if p != "-")
            rows.append((share, dso, symbol))
    objects = sum(s for s, _, sym in rows if any(k in sym for k in _OBJECT_WORK))
    native = sum(s for s, dso, _ in rows if dso.startswith("_native"))
    lines = [
        f"{name} {op}: {native:.1f} % in _native itself, {objects:.1f} % in "
        "CPython's object machinery (allocator, dict/set and attribute "
        "lookups, dealloc, gc)"
    ]
    lines += [f"  {s:5.1f} %  {dso:<40} {sym}" for s, dso, sym in rows[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=300_000)
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if shutil.which("perf") is None:
        print("perf not found (install linux-perf)", file=sys.stderr)
        return 2
    if not native_available() or os.environ.get("TURNSTREAM_NATIVE_CODEC") == "0":
        print("the native codec is not built here (make native)", file=sys.stderr)
        return 2
    blocks = [
        f"perf top symbols of the codec's native path, {args.number} calls per row, "
        f"{now_iso()}"
    ]
    for name in ("TokenDelta", "StepDone", "TurnDone"):
        for op in ("encode", "decode"):
            blocks.append(_row(name, op, args.number, args.top))
            print(blocks[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
