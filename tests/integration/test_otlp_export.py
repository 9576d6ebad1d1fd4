"""The OTLP sink against a real Jaeger, no broker: embedded turns, one trace each.

An embedded session (``LocalSession`` over the in-memory journal) runs turns
with the live tracer exporting through :class:`~turnstream.tracing.otlp.
OtlpSink`; Jaeger's query API then holds one trace per turn with the
expected tree, and the spans rebuilt from the same journal carry the same ids.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.support.eventually import assert_eventually
from tests.support.jaeger import Jaeger, TraceView, jaeger

from turnstream.content import Usage
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.tracing import TraceContexts, ratio_sampler, trace_id_for
from turnstream.testing import FunctionTool, call, open_rig, text_step, tool_step
from turnstream.tracing import JournalSpans, LiveTracer, TracingSettings
from turnstream.tracing.otlp import OtlpSink

__all__ = ["jaeger"]

pytestmark = [pytest.mark.slow]


async def test_one_trace_per_turn_with_its_tree(jaeger: Jaeger) -> None:
    sink = OtlpSink(
        TracingSettings(endpoint=jaeger.otlp_endpoint, service_name="embedded"),
        schedule_delay_ms=100,
    )
    traces = TraceContexts(ratio_sampler(1.0))
    usage = Usage(input_tokens=5, output_tokens=3)
    steps = [
        tool_step(call("lookup", "{}", id="call_1"), usage=usage),
        text_step("done", usage=usage),
    ] * 2
    async with open_rig(
        *steps,
        tools=[FunctionTool("lookup", lambda _input, _ctx: "found")],
        hooks=HookRunner().traced(LiveTracer(sink, traces)),
    ) as rig:
        for question in ("first", "second"):
            await rig.submit(question)
            await rig.idle()
        journal = rig.journal_events()
    assert await asyncio.to_thread(sink.flush)
    await asyncio.to_thread(sink.close)
    turn_ids = [e.header.turn_id for e in journal if e.type_name == "TurnStarted"]
    assert len(turn_ids) == 2
    rebuilt = JournalSpans().add_all((e, ()) for e in journal)
    for turn_id in turn_ids:
        assert turn_id is not None
        trace_id = trace_id_for(turn_id)

        async def complete(trace_id: int = trace_id) -> TraceView:
            view = await asyncio.to_thread(jaeger.trace, trace_id)
            assert view is not None
            assert len(view.spans) == 6
            return view

        view = await assert_eventually(complete, timeout=30, interval=0.3)
        (turn,) = view.named("invoke_agent")
        assert view.parent(turn) is None
        steps_ids = {s["spanID"] for s in view.named("step")}
        assert len(steps_ids) == 2
        assert all(view.parent(s) == turn["spanID"] for s in view.named("step"))
        chats = view.named("chat scripted-model")
        assert len(chats) == 2
        assert all(view.parent(c) in steps_ids for c in chats)
        assert {view.tag(c, "gen_ai.usage.input_tokens") for c in chats} == {5}
        (tool,) = view.named("execute_tool lookup")
        assert view.parent(tool) in steps_ids
        assert view.tag(tool, "gen_ai.tool.name") == "lookup"
        # The journal's spans name the very same spans.
        ours = {f"{s.span_id:016x}" for s in rebuilt if s.trace_id == trace_id}
        assert ours == {s["spanID"] for s in view.spans}
