"""The health endpoint: /metrics scraped in the Prometheus format, /ready flips."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.observability import HealthServer, service_registry


async def http_get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    """One request over a raw socket; returns (status, body)."""
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body.decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def metrics() -> ServiceMetrics:
    m = ServiceMetrics()
    m.turns_started = 3
    m.steps_committed = 7
    m.terminals.update({"TurnDone": 2, "TurnInterrupted": 1})
    m.commit_latency.observe(0.004)
    m.commit_latency.observe(0.2)
    m.consumer_lag[0] = 5
    m.deltas_dropped = 4
    m.commands.update({"SubmitInput": 3})
    return m


async def test_metrics_endpoint_serves_prometheus_text(metrics: ServiceMetrics) -> None:
    """Turns, steps, terminals, commit latency, lag and drops are exported."""
    async with HealthServer(service_registry(metrics), lambda: metrics.ready) as server:
        status, body = await http_get(server.port, "/metrics")

    assert status == 200
    found = samples(body)
    assert found[("turnstream_turns_started_total", ())] == 3
    assert found[("turnstream_steps_total", ())] == 7
    assert found[("turnstream_turn_terminals_total", (("kind", "TurnDone"),))] == 2
    assert found[("turnstream_commit_latency_seconds_count", ())] == 2
    assert found[("turnstream_commit_latency_seconds_bucket", (("le", "0.005"),))] == 1
    assert found[("turnstream_commit_latency_seconds_bucket", (("le", "+Inf"),))] == 2
    assert found[("turnstream_consumer_lag_records", (("partition", "0"),))] == 5
    assert found[("turnstream_delta_drops_total", ())] == 4
    assert found[("turnstream_commands_total", (("type", "SubmitInput"),))] == 3
    assert ("process_cpu_seconds_total", ()) in found


async def test_metrics_are_read_at_scrape_time(metrics: ServiceMetrics) -> None:
    """A second scrape sees the counters' new values (nothing is cached)."""
    async with HealthServer(service_registry(metrics), lambda: metrics.ready) as server:
        _, before = await http_get(server.port, "/metrics")
        metrics.turns_started += 1
        _, after = await http_get(server.port, "/metrics")

    assert samples(before)[("turnstream_turns_started_total", ())] == 3
    assert samples(after)[("turnstream_turns_started_total", ())] == 4


async def test_ready_is_503_until_the_service_is_ready(metrics: ServiceMetrics) -> None:
    """/ready answers 503 before partitions are restored and 200 after."""
    async with HealthServer(service_registry(metrics), lambda: metrics.ready) as server:
        before = await http_get(server.port, "/ready")
        metrics.ready = True
        after = await http_get(server.port, "/ready")
        gauge = samples((await http_get(server.port, "/metrics"))[1])

    assert before == (503, "not ready\n")
    assert after == (200, "ready\n")
    assert gauge[("turnstream_ready", ())] == 1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/healthz", 200, id="liveness"),
        pytest.param("GET", "/nope", 404, id="unknown-path"),
        pytest.param("POST", "/metrics", 405, id="post"),
        pytest.param("HEAD", "/ready", 503, id="head"),
        pytest.param("GET", "/metrics?name=x", 200, id="query-ignored"),
    ],
)
async def test_health_server_routes(
    metrics: ServiceMetrics, method: str, path: str, status: int
) -> None:
    """Only GET/HEAD on the three paths; everything else is refused."""
    async with HealthServer(service_registry(metrics), lambda: False) as server:
        got, _ = await http_get(server.port, path, method)

    assert got == status


async def test_health_server_binds_loopback_by_default(metrics: ServiceMetrics) -> None:
    """The default bind address is 127.0.0.1, and the URL says so."""
    async with HealthServer(service_registry(metrics), lambda: True) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"


async def test_health_server_answers_garbage_with_400(metrics: ServiceMetrics) -> None:
    """A request head that is not HTTP gets a 400, not a crash."""
    async with HealthServer(service_registry(metrics), lambda: True) as server:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"nonsense\r\n\r\n")
            await writer.drain()
            raw = await reader.read()
            writer.close()
            await writer.wait_closed()

    assert raw.startswith(b"HTTP/1.1 400")


async def test_metrics_explain_turns_from_committed_events() -> None:
    """Durations, tokens, tool calls, failures by kind and rejections by reason come
    from the committed events themselves (what the journal says happened).
    """
    from datetime import timedelta

    from tests.unit.wire.golden import BUILDERS

    m = ServiceMetrics()
    started = BUILDERS["TurnStarted"]()
    done = BUILDERS["TurnDone"]()
    at = started.header.created_at
    assert at is not None
    done = done.model_copy(  # type: ignore[union-attr]
        update={
            "header": done.header.model_copy(
                update={"created_at": at + timedelta(seconds=3)}
            )
        }  # type: ignore[union-attr]
    )
    m.committed([started, BUILDERS["StepDone"](), done])  # type: ignore[list-item]
    m.committed([BUILDERS["TurnFailed"](), BUILDERS["TurnRejected"]()])  # type: ignore[list-item]
    async with HealthServer(service_registry(m), lambda: True) as server:
        _, body = await http_get(server.port, "/metrics")
    found = samples(body)
    assert found[("turnstream_turn_duration_seconds_count", ())] == 1
    assert found[("turnstream_turn_duration_seconds_sum", ())] == 3.0
    assert found[("turnstream_turn_duration_seconds_bucket", (("le", "2.5"),))] == 0
    assert found[("turnstream_turn_duration_seconds_bucket", (("le", "5.0"),))] == 1
    usage = done.usage  # type: ignore[union-attr]
    assert (
        found[("turnstream_tokens_total", (("kind", "input"),))] == usage.input_tokens
    )
    assert (
        found[("turnstream_tokens_total", (("kind", "output"),))] == usage.output_tokens
    )
    assert found[("turnstream_tool_calls_total", (("outcome", "ok"),))] == 1
    assert found[("turnstream_turn_failures_total", (("kind", "tool_limit"),))] == 1
    assert found[("turnstream_inputs_rejected_total", (("reason", "queue_full"),))] == 1
