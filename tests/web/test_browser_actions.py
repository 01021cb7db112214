"""What runs inside an action, on the built-in page in Chromium: a sub-agent (an agent called as
a tool) streams its text once, inside the row of the action that called it and under its name,
never as the parent's own text, and its answer is not repeated as the action's output; a
running tool's progress shows in its row until it finishes."""

from __future__ import annotations

import anyio
import pytest

from agentloop import Agent, tool
from agentloop.models import ModelRequest
from agentloop.testing import FunctionModel, Reply, call
from agentloop.tools import ToolContext
from agentloop.web import create_app

from ._serving import serving
from .test_browser import _page

# Chromium is heavy by nature: the whole module is slow, left out of the fast loop.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),  # Playwright's and uvicorn's
]

WEATHER = {"Oslo": "Oslo: **12°C** and rainy.", "Rome": "Rome: **25°C** and sunny."}

# Per action row: the tool, the sub-agent blocks inside it and their text, the plain outputs.
ROWS = """() => [...document.querySelectorAll('#chat .action')].map(a => ({
  name: a.querySelector('.name').textContent,
  subruns: [...a.querySelectorAll('[data-testid=subrun]')].map(s => s.textContent),
  outputs: [...a.querySelectorAll(':scope > .output')].map(o => o.textContent),
}))"""


async def test_a_sub_agents_text_shows_once_inside_its_action() -> None:
    """Two concurrent calls of one sub-agent: each streams into its own row, its answer is
    that row's output (once), and the parent's answer below mentions it without a copy."""

    def expert_reply(request: ModelRequest) -> Reply:
        city = "Oslo" if "Oslo" in request.messages[-1].text else "Rome"
        return Reply(text=WEATHER[city], chunk_size=4, delay=0.01)

    def top(request: ModelRequest) -> Reply:
        if request.messages[-1].role == "user":
            return Reply(
                text="Asking the expert. ",
                calls=[
                    call("expert", {"task": "Oslo weather?"}, id="oslo"),
                    call("expert", {"task": "Rome weather?"}, id="rome"),
                ],
            )
        return Reply(text="Rome is warmer.", chunk_size=5, delay=0.01)

    expert = Agent(FunctionModel(expert_reply), name="expert")
    agent = Agent(FunctionModel(top), tools=[expert.as_tool(description="A weather expert.")])
    async with serving(create_app(agent)) as base, _page(base) as page:
        await page.fill("#input", "Oslo or Rome?")
        await page.click("#send")
        await page.wait_for_selector("[data-testid=answer]", timeout=15_000)
        rows = await page.evaluate(ROWS)
        chat = await page.inner_text("#chat")
        outside = await page.locator("#chat .reply > [data-testid=subrun]").count()
        answers = await page.locator("#chat [data-testid=answer]").all_text_contents()
    assert answers == ["Rome is warmer."]
    for text in ("Oslo: 12°C and rainy.", "Rome: 25°C and sunny."):
        assert chat.count(text) == 1, chat
    assert outside == 0  # no sub-agent block left in the parent's own flow
    by_city = sorted(rows, key=lambda r: r["subruns"][0])
    assert [r["name"] for r in by_city] == ["expert", "expert"]
    assert [r["subruns"] for r in by_city] == [
        ["expertOslo: 12°C and rainy."],
        ["expertRome: 25°C and sunny."],
    ]
    assert [r["outputs"] for r in by_city] == [[], []]  # the streamed answer is the output


async def test_a_running_tools_progress_shows_in_its_row_until_it_finishes() -> None:
    """``ToolContext.report_progress``: the row of the running call shows the last report
    (``2 / 3 · item 2``), and once the call finishes, its output instead."""
    reported, go_on = anyio.Event(), anyio.Event()

    @tool
    async def crunch(n: int, context: ToolContext) -> str:
        """Crunch ``n`` items.

        Args:
            n: how many
        """
        for i in range(1, n):
            await context.report_progress(i, n, f"item {i}")
        reported.set()
        await go_on.wait()
        return f"crunched {n}"

    def top(request: ModelRequest) -> Reply:
        if request.messages[-1].role == "user":
            return Reply(calls=[call("crunch", {"n": 3})])
        return Reply(text="Crunched.")

    agent = Agent(FunctionModel(top), tools=[crunch])
    async with serving(create_app(agent)) as base, _page(base) as page:
        await page.fill("#input", "crunch")
        await page.click("#send")
        with anyio.fail_after(15):
            await reported.wait()
        shown = page.locator("#chat .action .progress")
        await shown.wait_for(timeout=15_000)
        await page.wait_for_function(
            "() => document.querySelector('#chat .action .progress').textContent.includes('2 / 3')",
            timeout=15_000,
        )
        during = await shown.text_content()
        go_on.set()
        await page.wait_for_selector("[data-testid=answer]", timeout=15_000)
        after = await page.locator("#chat .action").text_content()
        left = await shown.count()
    assert during == "2 / 3 · item 2"
    assert left == 0 and after is not None and "→ crunched 3" in after
