"""The content model: blocks, chunks, messages and usage.

Pins the value rules the wire relies on: frozen models with extra fields
forbidden, the tagged unions, images with exactly one source (and bytes that
survive JSON), sealed thinking, Usage arithmetic and its overflow error.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from turnstream.content import (
    MAX_TOKEN_COUNT,
    AIMessage,
    Block,
    Chunk,
    Conversation,
    ImageBlock,
    ImageChunk,
    RefusalBlock,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
    text_of,
)
from turnstream.errors import TurnError, UsageOverflowError

FIELDS = list(Usage.model_fields)
counts = st.integers(min_value=0, max_value=MAX_TOKEN_COUNT)
usages = st.builds(Usage, **{f: counts for f in FIELDS})


# ------------------------------------------------------------------ usage


def test_usage_add_sums_field_wise() -> None:
    a = Usage(
        input_tokens=1,
        output_tokens=2,
        cache_read_tokens=3,
        cache_creation_tokens=4,
        reasoning_tokens=5,
    )
    b = Usage(
        input_tokens=10,
        output_tokens=20,
        cache_read_tokens=30,
        cache_creation_tokens=40,
        reasoning_tokens=50,
    )
    assert a.add(b) == Usage(
        input_tokens=11,
        output_tokens=22,
        cache_read_tokens=33,
        cache_creation_tokens=44,
        reasoning_tokens=55,
    )
    assert a.context_tokens() == 1 + 3 + 4
    assert a.total_tokens() == 1 + 3 + 4 + 2


@pytest.mark.parametrize("field", FIELDS)
def test_usage_add_overflow_is_a_typed_error(field: str) -> None:
    """Past the Avro long bound the sum fails; it never wraps or clamps."""
    big = Usage(**{field: MAX_TOKEN_COUNT})
    with pytest.raises(UsageOverflowError) as info:
        big.add(Usage(**{field: 1}))
    assert (info.value.field, info.value.left, info.value.right) == (
        field,
        MAX_TOKEN_COUNT,
        1,
    )
    assert isinstance(info.value, TurnError)
    assert info.value.kind == "usage_overflow"
    assert big.add(Usage()) == big


@given(a=usages, b=usages)
def test_usage_add_either_sums_or_reports_the_first_overflowing_field(
    a: Usage, b: Usage
) -> None:
    over = [f for f in FIELDS if getattr(a, f) + getattr(b, f) > MAX_TOKEN_COUNT]
    if over:
        with pytest.raises(UsageOverflowError) as info:
            a.add(b)
        assert info.value.field == over[0]
        return
    total = a.add(b)
    for f in FIELDS:
        assert getattr(total, f) == getattr(a, f) + getattr(b, f)
    assert total == b.add(a)


@pytest.mark.parametrize("value", [-1, MAX_TOKEN_COUNT + 1])
def test_usage_counts_are_bounded(value: int) -> None:
    with pytest.raises(ValidationError):
        Usage(input_tokens=value)


def test_reasoning_above_output_is_carried_not_rejected() -> None:
    odd = Usage(output_tokens=1, reasoning_tokens=2)
    assert not odd.reasoning_within_output()
    assert Usage(output_tokens=2, reasoning_tokens=2).reasoning_within_output()


# ----------------------------------------------------------------- blocks


@pytest.mark.parametrize(
    ("url", "data"),
    [
        pytest.param(None, None, id="neither"),
        pytest.param("https://x", b"x", id="both"),
    ],
)
def test_image_needs_exactly_one_source(url: str | None, data: bytes | None) -> None:
    with pytest.raises(ValidationError):
        ImageBlock(media_type="image/png", url=url, data=data)


@pytest.mark.parametrize("model", [ImageBlock, ImageChunk])
def test_image_bytes_survive_json_as_base64(
    model: type[ImageBlock] | type[ImageChunk],
) -> None:
    """Binary image data is not UTF-8: JSON carries it as base64."""
    image = model(media_type="image/png", data=bytes(range(256)))
    text = image.model_dump_json()
    assert '"data":"AAECAw' in text
    assert model.model_validate_json(text) == image


@pytest.mark.parametrize(
    ("block", "sealed"),
    [
        pytest.param(ThinkingBlock(thinking="t"), False, id="bare"),
        pytest.param(
            ThinkingBlock(signature="s"), False, id="signature-without-format"
        ),
        pytest.param(
            ThinkingBlock(signature="s", signature_format="anthropic"),
            True,
            id="signed",
        ),
        pytest.param(ThinkingBlock(provider_state="{}"), True, id="provider-state"),
    ],
)
def test_thinking_is_sealed_only_when_replayable(
    block: ThinkingBlock, sealed: bool
) -> None:
    assert block.is_sealed() is sealed


BLOCKS = [
    TextBlock(text="a"),
    RefusalBlock(text=""),
    ImageBlock(media_type="image/png", url="https://x"),
    ThinkingBlock(thinking="t"),
    ToolUseBlock(id="t1", name="ls", input='{"a": 1}'),
    ToolResultBlock(tool_use_id="t1", content=(TextBlock(text="ok"),), is_error=True),
]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.type)
def test_block_union_round_trips_through_json(block: object) -> None:
    adapter: TypeAdapter[Block] = TypeAdapter(Block)
    assert adapter.validate_json(adapter.dump_json(block)) == block  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "chunk",
    [TextChunk(text="a"), ToolUseChunk(index=1, id="t", name="n", input_json="{")],
    ids=lambda c: c.type,
)
def test_chunk_union_routes_by_type(chunk: object) -> None:
    adapter: TypeAdapter[Chunk] = TypeAdapter(Chunk)
    assert adapter.validate_json(adapter.dump_json(chunk)) == chunk  # type: ignore[arg-type]


def test_refusal_never_collapses_into_text() -> None:
    adapter: TypeAdapter[Block] = TypeAdapter(Block)
    assert (
        type(adapter.validate_python({"type": "refusal", "text": "no"})) is RefusalBlock
    )


def test_tool_input_is_kept_as_raw_json_text() -> None:
    """Provider bytes are replayed verbatim: no parse, no re-serialisation."""
    raw = '{"b": 1,  "a": [1.0e3]}'
    assert ToolUseBlock(id="t", name="n", input=raw).input == raw


@pytest.mark.parametrize("model", [TextBlock, Usage, UserMessage, AIMessage])
def test_content_models_are_frozen_and_closed(model: type) -> None:
    value = model(text="x") if model is TextBlock else model()
    with pytest.raises(ValidationError):
        setattr(value, next(iter(model.model_fields)), None)
    with pytest.raises(ValidationError):
        model.model_validate({**value.model_dump(), "extra": 1})


# ---------------------------------------------------------------- messages


def test_conversation_routes_by_role() -> None:
    adapter: TypeAdapter[Conversation] = TypeAdapter(Conversation)
    for message in (
        UserMessage(blocks=(TextBlock(text="hi"),)),
        AIMessage(
            blocks=(ToolUseBlock(id="t", name="n"),), usage=Usage(input_tokens=1)
        ),
        ToolResultMessage(tool_use_id="t", is_error=True),
    ):
        assert adapter.validate_json(adapter.dump_json(message)) == message  # type: ignore[arg-type]


def test_ai_message_tool_uses_in_order() -> None:
    first, second = ToolUseBlock(id="1", name="a"), ToolUseBlock(id="2", name="b")
    message = AIMessage(blocks=(first, TextBlock(text="x"), second))
    assert message.tool_uses() == (first, second)


def test_text_of_flattens_text_and_marks_the_rest() -> None:
    blocks = (
        TextBlock(text="a"),
        RefusalBlock(text="b"),
        ToolResultBlock(tool_use_id="t", content=(TextBlock(text="c"),)),
        ImageBlock(media_type="image/png", url="u"),
    )
    assert text_of(blocks) == "abc[unsupported image]"
