"""The gateway's chat page in a real headless browser (Debian's chromium, chromedriver).

A gateway on a real uvicorn server and the real broker; an in-process loop actor
whose scripted model first calls a tool the policy asks about (a gate), then streams
its answer with a pause in the middle, so the test reloads the page while the turn is
held mid-stream. The page loads, sends the input, shows the gate, approves it, shows
the first tokens; after a reload it shows them again (kept with the stream's
cursor). Then the tab leaves the page, the rest of the turn streams and commits
while no page listens, and the tab comes back: the page resumes the stream with
``Last-Event-ID`` and the answer on it is the committed answer exactly (no token
lost, none twice).

Selenium's calls block, so each runs in a worker thread while the event loop serves
the gateway and the actor.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httpx
import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)

from turnstream.content import TextChunk
from turnstream.gateway import Backend, GatewaySettings, Tenants, start_server
from turnstream.runtime.model_client import StreamEnd
from turnstream.testing import (
    FunctionTool,
    Pause,
    ScriptedModel,
    StaticAccessPolicy,
    call,
    tool_step,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(180)]

WAIT = 45.0
ANSWER = ("The ", "answer ", "is ", "forty-", "two.")
TOKEN = "browser-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
T = TypeVar("T")

if (CHROMIUM is None or DRIVER is None) and os.environ.get("CI") != "true":
    pytest.skip(
        "needs Debian's chromium and chromium-driver (apt-get install chromium "
        "chromium-driver; .ci/run installs them)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402 - only where a browser is
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@contextmanager
def _browser() -> Iterator[WebDriver]:
    assert CHROMIUM is not None
    assert DRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _text_of(driver: WebDriver, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def _wait(driver: WebDriver, done: Callable[[WebDriver], T]) -> T:
    return WebDriverWait(driver, WAIT).until(done)


@pytest.fixture
async def gateway_url(kafka_bootstrap: str) -> AsyncIterator[tuple[str, Pause]]:
    prefix = unique_prefix("browser")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    pause = Pause()
    model = ScriptedModel(
        [
            tool_step(call("lookup", '{"q": "it"}')),
            [
                *(TextChunk(text=t) for t in ANSWER[:3]),
                pause,
                *(TextChunk(text=t) for t in ANSWER[3:]),
                StreamEnd(stop_reason="end_turn"),
            ],
        ]
    )

    async def lookup(_input: str, _ctx: object) -> str:
        return "42"

    models = Models(
        default=model,
        tools=(FunctionTool(name="lookup", fn=lookup),),
        policy=StaticAccessPolicy(per_tool={"lookup": "ask"}),
    )
    service = service_for(kafka_bootstrap, topics, group_id=f"{prefix}g", models=models)
    settings = GatewaySettings(tenants=Tenants.parse(f"alice {TOKEN}\n"), keepalive=1.0)

    async def connect() -> Backend:
        return await Backend.connect(
            clients_for(kafka_bootstrap), topics, stream_queue=2000
        )

    try:
        async with running(service), start_server(settings, connect) as url:
            yield url, pause
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_chat_page_streams_approves_and_resumes_after_a_reload(
    gateway_url: tuple[str, Pause],
) -> None:
    url, pause = gateway_url
    with _browser() as driver:

        def ask() -> None:
            driver.get(url)
            token = driver.find_element(By.ID, "token")
            token.send_keys(TOKEN, Keys.TAB)  # "change" stores it
            driver.find_element(By.ID, "input").send_keys("what is it?")
            driver.find_element(By.ID, "send").click()
            approve = _wait(
                driver,
                lambda d: d.find_elements(By.CSS_SELECTOR, ".gate button.approve"),
            )
            approve[0].click()
            _wait(driver, lambda d: _text_of(d, ".assistant") == "".join(ANSWER[:3]))

        await asyncio.to_thread(ask)
        await pause.wait_reached(within=WAIT)

        def reload() -> tuple[str, str]:
            driver.refresh()  # mid-stream: the turn is held on the pause
            _wait(driver, lambda d: _text_of(d, ".assistant") == "".join(ANSWER[:3]))
            user = _text_of(driver, ".user")
            loop = driver.execute_script(
                "return JSON.parse(sessionStorage.getItem('turnstream.chat')).loop"
            )
            driver.get("about:blank")  # away while the rest of the turn streams
            return user, str(loop)

        user, loop = await asyncio.to_thread(reload)
        assert user == "what is it?"
        async with httpx.AsyncClient(base_url=url) as http:
            held = await http.get(f"/v1/loops/{loop}", headers=AUTH)
            assert held.json()["status"] == "running", held.text
            pause.release()

            async def idle() -> None:
                state = await http.get(f"/v1/loops/{loop}", headers=AUTH)
                assert state.json()["status"] == "idle", state.text

            await assert_eventually(idle, timeout=WAIT, message="turn not done")

        def back() -> str:
            driver.get(url)  # the page resumes after the last event it showed
            return _text_of(driver, ".user")

        assert await asyncio.to_thread(back) == user

        def finish() -> tuple[str, str, str]:
            _wait(driver, lambda d: _text_of(d, ".outcome") == "TurnDone")
            return (
                _text_of(driver, ".assistant"),
                _text_of(driver, ".gate"),
                _text_of(driver, "#status"),
            )

        answer, gate, status = await asyncio.to_thread(finish)
    assert answer == "".join(ANSWER)
    assert gate.endswith(": approve")
    assert status == "idle"
