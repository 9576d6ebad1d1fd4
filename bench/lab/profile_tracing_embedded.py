"""Tracing off vs on in memory (LocalSession tool turns).

The worker-thread sink vs the SDK BatchSpanProcessor.
python bench/lab/profile_tracing_embedded.py (no broker; needs make jaeger's binary).
"""

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, ".")
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from tests.support.jaeger import jaeger_binary, running_jaeger

from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.tracing import TraceContexts, ratio_sampler
from turnstream.testing import FunctionTool, call, open_rig, text_step, tool_step
from turnstream.tracing import LiveTracer, TracingSettings
from turnstream.tracing.otlp import OtlpSink


class OldSink:
    def __init__(self, url):
        self._h = OtlpSink(TracingSettings(endpoint="http://127.0.0.1:1"))  # for _sdk()
        self._p = BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces"))

    def emit(self, s):
        self._p.on_end(self._h._sdk(s))

    def flush(self):
        self._p.force_flush()


N = 400


async def run(sink):
    steps = []
    for _ in range(N):
        steps += [tool_step(call("lookup", "{}", id="c1")), text_step("done")]
    hooks = (
        HookRunner()
        if sink is None
        else HookRunner().traced(LiveTracer(sink, TraceContexts(ratio_sampler(1.0))))
    )
    async with open_rig(
        *steps, tools=[FunctionTool("lookup", lambda i, c: "x")], hooks=hooks
    ) as rig:
        await rig.submit("warm")
        await rig.idle()
        t = time.process_time()
        for _ in range(N - 1):
            await rig.submit("q")
            await rig.idle()
        if sink is not None:
            sink.flush()
        return (time.process_time() - t) / (N - 1) * 1e3


async def main():
    with (
        tempfile.TemporaryDirectory() as d,
        running_jaeger(jaeger_binary(), Path(d)) as j,
    ):
        res = {"off": [], "old": [], "new": []}
        for _ in range(3):
            for name, mk in [
                ("off", lambda: None),
                ("old", lambda: OldSink(j.otlp_endpoint)),
                ("new", lambda: OtlpSink(TracingSettings(endpoint=j.otlp_endpoint))),
            ]:
                res[name].append(round(await run(mk()), 3))
        print(res, flush=True)


asyncio.run(main())
