"""The built-in page in a real browser: Debian's headless Chromium driven by Playwright with the
system executable (no browser download). It shows the streamed thought before the answer, tools
starting mid-reply with their timing, the goal card, the withdrawn draft struck through, and the
final answer, which holds ``<script>`` and ``<img onerror>`` and renders as text. It saves a
screenshot (``AGENTLOOP_ARTIFACTS``, else the test's temporary directory) and prints its path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agentloop.sessions import InMemoryStore
from agentloop.testing import ProviderServer
from agentloop.web import create_app

from ._demo import DRAFT, THOUGHT, DemoProvider, demo_agent
from ._serving import serving

pytestmark = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Playwright's and uvicorn's

XSS = 'Go to Paris. <script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2">'


def _chromium() -> str:
    found = os.environ.get("AGENTLOOP_CHROMIUM") or shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium (apt-get install chromium)")
    return found


@pytest.mark.slow
async def test_the_page_streams_a_run_and_renders_model_text_as_text(tmp_path: Path) -> None:
    """Thought before answer, actions mid-reply with timings, goal card, a struck-through
    withdrawn draft, and an answer whose markup is shown, not run."""
    executable = _chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    shots = Path(os.environ.get("AGENTLOOP_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  before the loop has work
    async with ProviderServer(DemoProvider(final=XSS, chunk_delay=0.03)) as provider:
        agent = demo_agent(provider.url, store=InMemoryStore())
        async with (
            agent.model,  # type: ignore[union-attr]
            serving(create_app(agent)) as base,
            playwright_api.async_playwright() as pw,
        ):
            browser = await pw.chromium.launch(
                executable_path=executable, args=["--no-sandbox"], headless=True
            )
            try:
                page = await browser.new_page(viewport={"width": 900, "height": 900})
                await page.goto(base)
                await page.fill("#input", "Paris or Oslo this weekend?")
                await page.click("#send")
                await page.wait_for_function(
                    "t => document.querySelector('.thought')?.textContent.includes(t)",
                    arg=THOUGHT,
                    timeout=15_000,
                )
                assert await page.is_hidden("#final")  # the thought came first
                await page.wait_for_selector("#final:not([hidden])", timeout=15_000)
                answer = await page.text_content("#answer")
                withdrawn = page.locator(".withdrawn .text")
                withdrawn_text = await withdrawn.text_content()
                decoration = await withdrawn.evaluate("n => getComputedStyle(n).textDecorationLine")
                goal = await page.text_content("#goal")
                goal_hidden = await page.is_hidden("#goal")
                timings = await page.locator(".action .timing").all_text_contents()
                planted = await page.evaluate(
                    "() => [window.__xss, document.querySelectorAll('#answer *').length]"
                )
                shot = shots / "web-page.png"
                await page.screenshot(path=str(shot), full_page=True)
            finally:
                await browser.close()
    print(f"screenshot: {shot}")
    assert answer == XSS  # the markup is text
    assert planted == [None, 0]  # no script ran, no element was made
    assert withdrawn_text == DRAFT and "line-through" in decoration
    assert not goal_hidden and goal is not None and "Pick a city for the weekend" in goal
    assert any("mid-reply" in t for t in timings)
    assert any("took" in t for t in timings)
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
async def test_the_page_asks_for_approval_and_resumes_the_run() -> None:
    """A call that needs approval shows as pending with its input; approving it resumes the
    run through the API and the page shows the tool's output and the answer."""
    from agentloop import Agent, tool
    from agentloop.models.openai import OpenAIChatModel
    from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn

    @tool(requires_approval=True)
    async def transfer(amount: int, to: str) -> str:
        """Send money.

        Args:
            amount: how much
            to: to whom
        """
        return f"sent {amount} to {to}"

    executable = _chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("transfer", {"amount": 5, "to": "bob"})]),
        "Paid bob.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as provider:
        model = OpenAIChatModel("emulated", base_url=provider.url + "/v1", api_key="k")
        agent = Agent(model, tools=[transfer], store=InMemoryStore())
        async with (
            model,
            serving(create_app(agent)) as base,
            playwright_api.async_playwright() as pw,
        ):
            browser = await pw.chromium.launch(
                executable_path=executable, args=["--no-sandbox"], headless=True
            )
            try:
                page = await browser.new_page()
                await page.goto(base)
                await page.fill("#input", "pay bob 5")
                await page.click("#send")
                await page.wait_for_selector("#pending:not([hidden]) button.approve")
                pending = await page.text_content("#pending-calls")
                await page.click("button.approve")
                await page.wait_for_selector("#final:not([hidden])", timeout=15_000)
                answer = await page.text_content("#answer")
                outputs = await page.locator(".action .output").all_text_contents()
            finally:
                await browser.close()
    assert pending is not None and 'transfer {"amount":5,"to":"bob"}' in pending
    assert answer == "Paid bob."
    assert any("sent 5 to bob" in o for o in outputs)
