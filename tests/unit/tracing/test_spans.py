"""Spans of a turn: live from the hooks, rebuilt from the journal, the same tree."""

from __future__ import annotations

from turnstream.content import Usage
from turnstream.errors import ProviderError
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.tracing import TraceContexts, ratio_sampler, trace_id_for
from turnstream.testing import (
    FunctionTool,
    ScriptedModel,
    call,
    open_rig,
    text_step,
    tool_step,
)
from turnstream.tracing import JournalSpans, LiveTracer, SpanRecord


class ListSink:
    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []

    def emit(self, span: SpanRecord) -> None:
        self.spans.append(span)


def _tree(spans: list[SpanRecord]) -> set[tuple[str, int, int, int]]:
    return {(s.name, s.trace_id, s.span_id, s.parent_id) for s in spans}


def _fails(_input: str, _ctx: object) -> str:
    raise RuntimeError("secret detail")


async def test_live_spans_have_genai_attributes_and_match_the_journal() -> None:
    """One trace per turn: turn > steps > chat and execute_tool, as rebuilt."""
    sink = ListSink()
    traces = TraceContexts(ratio_sampler(1.0))
    hooks = HookRunner().traced(LiveTracer(sink, traces))
    usage = Usage(input_tokens=11, output_tokens=7)
    async with open_rig(
        tool_step(call("lookup", '{"q": "x"}', id="call_1"), usage=usage),
        text_step("done", usage=usage),
        tools=[FunctionTool("lookup", _fails)],
        hooks=hooks,
    ) as rig:
        await rig.submit("a private question")
        await rig.idle()
        journal = rig.journal_events()
    live = sink.spans
    names = sorted(s.name for s in live)
    assert names == [
        "chat scripted-model",
        "chat scripted-model",
        "execute_tool lookup",
        "invoke_agent",
        "step",
        "step",
    ]
    (turn,) = [s for s in live if s.name == "invoke_agent"]
    assert len({s.trace_id for s in live}) == 1
    assert turn.parent_id == 0
    assert turn.trace_id == trace_id_for(journal[1].header.turn_id)  # type: ignore[arg-type]
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.usage.input_tokens"] == 22
    steps = {s.span_id for s in live if s.name == "step"}
    assert all(s.parent_id == turn.span_id for s in live if s.name == "step")
    chats = [s for s in live if s.name.startswith("chat")]
    assert all(c.parent_id in steps and c.client for c in chats)
    attributes = dict(chats[0].attributes)
    attributes.pop("gen_ai.request.max_tokens", None)
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "scripted-model",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
    }
    (tool,) = [s for s in live if s.name.startswith("execute_tool")]
    assert tool.parent_id in steps
    assert tool.error_type == "tool_error"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    # Never message content or tool output unless the operator opts in.
    text = repr([s.attributes for s in live])
    assert "private question" not in text
    assert "secret detail" not in text
    rebuilt = JournalSpans().add_all((e, ()) for e in journal)
    assert _tree(rebuilt) == _tree(live)


async def test_content_is_recorded_only_when_opted_in() -> None:
    sink = ListSink()
    traces = TraceContexts(ratio_sampler(1.0))
    hooks = HookRunner().traced(LiveTracer(sink, traces, capture_content=True))
    async with open_rig(text_step("done"), hooks=hooks) as rig:
        await rig.submit("a private question")
        await rig.idle()
    (chat,) = [s for s in sink.spans if s.name.startswith("chat")]
    assert "a private question" in str(chat.attributes["gen_ai.input.messages"])


async def test_failed_model_request_sets_error_type() -> None:
    sink = ListSink()
    traces = TraceContexts(ratio_sampler(1.0))
    hooks = HookRunner().traced(LiveTracer(sink, traces))
    model = ScriptedModel([], fail_with=ProviderError("scripted", "boom"))
    async with open_rig(model=model, hooks=hooks) as rig:
        await rig.submit("hi")
        await rig.idle()
        journal = rig.journal_events()
    by_name = {s.name: s for s in sink.spans}
    assert by_name["chat scripted-model"].error_type == "provider"
    assert by_name["invoke_agent"].error_type == "provider"
    assert by_name["invoke_agent"].attributes["turnstream.turn.outcome"] == "failed"
    (rebuilt,) = JournalSpans().add_all((e, ()) for e in journal)
    assert rebuilt.error_type == "provider"


async def test_unsampled_turns_record_nothing() -> None:
    sink = ListSink()
    hooks = HookRunner().traced(LiveTracer(sink, TraceContexts(ratio_sampler(0.0))))
    async with open_rig(text_step("done"), hooks=hooks) as rig:
        await rig.submit("hi")
        await rig.idle()
        journal = rig.journal_events()
    assert sink.spans == []
    assert JournalSpans(ratio_sampler(0.0)).add_all((e, ()) for e in journal) == []
