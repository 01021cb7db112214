"""The built-in page in a real browser: Debian's headless Chromium driven by Playwright with the
system executable (no browser download). The page is a chat: each question stays on it with its
streamed thought, its actions where they started among the text, and its answer, once, as
sanitised Markdown (script tags, ``on*`` attributes and ``javascript:`` links stay inert text).
A second question continues the session below the first, a reload shows the session's history,
and waiting calls are approved or denied on the page. The chat test saves a screenshot
(``AGENTLOOP_ARTIFACTS``, else the test's temporary directory) and prints its path."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, Tool, tool
from agentloop.models import ModelRequest
from agentloop.sessions import InMemoryStore
from agentloop.testing import FunctionModel, ProviderServer, Reply, Thought, call
from agentloop.web import create_app

from ._demo import DRAFT, THOUGHT, DemoProvider, demo_agent
from ._serving import serving

# Chromium is heavy by nature: the whole module is slow, left out of the fast loop.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),  # Playwright's and uvicorn's
]

XSS = 'Go to Paris. <script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2">'
ANSWER = "\n".join(
    [
        "Go to **Paris**: `21°C` and [sunny](https://weather.example/paris).",
        "",
        "- pack a *hat*",
        "- <script>window.__xss = 1</script>",
        '- <img src=x onerror="window.__xss = 2">',
        "- [click](javascript:window.__xss=3) and [again](JaVaScRiPt:window.__xss=4)",
        '- <a href="javascript:window.__xss=5" onclick="window.__xss=6">raw</a>',
        "- ![pic](javascript:window.__xss=7) [tab](<java\tscript:window.__xss=8>)",
    ]
)
QUESTIONS = ["Paris or Oslo this weekend?", "And the second question?"]

# What the page must never make of model text: elements that run or fetch, handlers, bad links.
INERT = """() => {
  const chat = document.querySelector('#chat');
  const made = chat.querySelectorAll('script, img, iframe, object, embed, svg, style').length;
  const handlers = [...chat.querySelectorAll('*')]
    .flatMap(n => [...n.attributes].map(a => a.name)).filter(a => a.startsWith('on'));
  const links = [...chat.querySelectorAll('a')].map(a => a.getAttribute('href'))
    .filter(h => !/^(https?:|mailto:)/.test(h));
  return {xss: window.__xss ?? null, made, handlers, links};
}"""
SAFE: dict[str, Any] = {"xss": None, "made": 0, "handlers": [], "links": []}


def _chromium() -> str:
    found = os.environ.get("AGENTLOOP_CHROMIUM") or shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium (apt-get install chromium)")
    return found


@asynccontextmanager
async def _page(base: str) -> AsyncIterator[Any]:
    """A fresh Chromium page at ``base``."""
    executable = _chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=executable, args=["--no-sandbox"], headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 900, "height": 900})
            await page.goto(base)
            yield page
        finally:
            await browser.close()


async def _ask(page: Any, question: str, answers: int) -> None:
    await page.fill("#input", question)
    await page.click("#send")
    await page.wait_for_function(
        "n => document.querySelectorAll('#chat [data-testid=answer]').length >= n",
        arg=answers,
        timeout=15_000,
    )


@tool
async def lookup(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: what to look up
    """
    await anyio.sleep(0.05)
    return f"{topic}: 21°C, sunny"


def _chat_model(users_seen: list[int]) -> FunctionModel:
    def reply(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and QUESTIONS[1] in last.text:
            users_seen.append(sum(m.role == "user" for m in request.messages))
            return Reply(text="The second answer, with `code`.", chunk_size=6, delay=0.01)
        if last.role == "user":
            return Reply(
                timeline=[
                    (0.0, Thought("I should look the weather up.")),
                    (0.05, "Let me check. "),
                    (0.1, call("lookup", {"topic": "Paris"})),
                    (0.4, "Checking now."),
                ]
            )
        return Reply(text=ANSWER, chunk_size=9, delay=0.01)

    return FunctionModel(reply)


async def _turns(page: Any) -> list[dict[str, Any]]:
    """Each turn's question, the classes of its reply's blocks in order, and its answers."""
    return list(
        await page.evaluate(
            """() => [...document.querySelectorAll('#chat .turn')].map(t => ({
              question: t.querySelector('.question').textContent,
              blocks: [...t.querySelectorAll('.reply .attempt > *, .reply > .answer')]
                .map(n => n.className + ': ' + n.textContent.slice(0, 24)),
              answers: [...t.querySelectorAll('[data-testid=answer]')].map(n => n.textContent),
              strong: [...t.querySelectorAll('.answer strong')].map(n => n.textContent),
              links: [...t.querySelectorAll('.answer a')].map(n => n.getAttribute('href')),
              outputs: [...t.querySelectorAll('.action .output')].map(n => n.textContent),
            }))"""
        )
    )


async def test_the_page_is_a_chat_with_safe_markdown_and_history(tmp_path: Path) -> None:
    """Two questions stay on the page in one session, each with its answer once; the first's
    action sits between the text before and after it; the answer is Markdown whose markup
    and bad links stay inert; a reload shows the same conversation from the history."""
    shots = Path(os.environ.get("AGENTLOOP_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  before the loop has work
    users_seen: list[int] = []
    agent = Agent(_chat_model(users_seen), tools=[lookup], store=InMemoryStore())
    async with serving(create_app(agent)) as base, _page(base) as page:
        await _ask(page, QUESTIONS[0], 1)
        await _ask(page, QUESTIONS[1], 2)
        live = await _turns(page)
        inert = await page.evaluate(INERT)
        items = await page.locator("#chat .turn").first.locator(".answer li").all_text_contents()
        shot = shots / "web-page.png"
        await page.screenshot(path=str(shot), full_page=True)
        await page.reload()
        await page.wait_for_function(
            "() => document.querySelectorAll('#chat [data-testid=answer]').length === 2",
            timeout=15_000,
        )
        reloaded = await _turns(page)
        inert_reloaded = await page.evaluate(INERT)
    print(f"screenshot: {shot}")
    assert [t["question"] for t in live] == QUESTIONS
    assert users_seen == [2]  # the second question continued the session
    first, second = live
    kinds = [b.split(":")[0] for b in first["blocks"]]
    assert kinds == ["thought", "text", "action", "text", "text answer"], first["blocks"]
    assert "Let me check." in first["blocks"][1] and "Checking now." in first["blocks"][3]
    assert len(first["answers"]) == 1 and first["answers"][0].startswith("Go to Paris: 21°C")
    assert sum("Go to Paris" in b for b in first["blocks"]) == 1  # the answer shows once
    assert first["strong"] == ["Paris"]
    assert first["links"] == ["https://weather.example/paris"]
    assert items[1] == "<script>window.__xss = 1</script>"  # markup shown as text
    assert items[3] == "click and again"  # javascript: links are their text only
    assert first["outputs"] == ["→ Paris: 21°C, sunny"]
    assert second["answers"] == ["The second answer, with code."]
    assert inert == SAFE and inert_reloaded == SAFE
    assert [t["question"] for t in reloaded] == QUESTIONS
    assert [t["answers"] for t in reloaded] == [t["answers"] for t in live]
    assert reloaded[0]["strong"] == ["Paris"] and reloaded[0]["outputs"] == first["outputs"]
    assert [b.split(":")[0] for b in reloaded[0]["blocks"]] == kinds
    assert shot.stat().st_size > 10_000


async def test_the_page_streams_thoughts_tools_goal_and_a_withdrawn_draft() -> None:
    """ReAct on the emulated provider: the thought before the answer, actions mid-reply with
    timings, the goal card, a struck-through withdrawn draft, and the answer once, its markup
    shown, not run. A reload mid-run shows the committed steps from the history and reads the
    rest from the run's log, repeating nothing."""
    async with ProviderServer(DemoProvider(final=XSS, chunk_delay=0.05)) as provider:
        agent = demo_agent(provider.url, store=InMemoryStore())
        async with (
            agent.model,  # type: ignore[union-attr]
            serving(create_app(agent)) as base,
            _page(base) as page,
        ):
            await page.fill("#input", "Paris or Oslo this weekend?")
            await page.click("#send")
            await page.wait_for_function(
                "t => document.querySelector('.thought')?.textContent.includes(t)",
                arg=THOUGHT,
                timeout=15_000,
            )
            early = await page.locator("[data-testid=answer]").count()  # the thought came first
            await page.wait_for_function(
                "() => document.querySelectorAll('.action .output').length === 2", timeout=15_000
            )
            timings = await page.locator(".action .timing").all_text_contents()
            await page.reload()  # the first step is in the history, the rest still to come
            await page.wait_for_selector("[data-testid=answer]", timeout=15_000)
            turns = await _turns(page)
            answers = await page.locator("[data-testid=answer]").all_text_contents()
            shown = await page.evaluate(
                "() => [...document.querySelectorAll('#chat .text')]"
                ".filter(n => n.textContent.includes('Go to Paris')).length"
            )
            withdrawn = page.locator(".withdrawn .text")
            withdrawn_text = await withdrawn.text_content()
            decoration = await withdrawn.evaluate("n => getComputedStyle(n).textDecorationLine")
            goal = await page.text_content("#goal")
            goal_hidden = await page.is_hidden("#goal")
            inert = await page.evaluate(INERT)
    assert early == 0
    assert answers == [XSS]  # the markup is text
    kinds = [b.split(":")[0] for b in turns[0]["blocks"]]
    assert len(turns) == 1 and kinds == [
        *("thought", "action", "action"),  # step 0, from the history
        *("thought", "action"),  # step 1
        *("thought", "text", "withdrawn-note"),  # the draft
        *("thought", "text answer"),  # its rewrite
    ], turns[0]["blocks"]
    assert shown == 1  # the answer shows once
    assert inert == SAFE
    assert withdrawn_text == DRAFT and "line-through" in decoration
    assert not goal_hidden and goal is not None and "Pick a city for the weekend" in goal
    assert any("mid-reply" in t for t in timings)
    assert any("took" in t for t in timings)


class _CutFirstStream:
    """ASGI wrapper: the first streamed ``POST /api/runs`` loses its connection mid-run, at its
    third chunk of frames, once the page has had time to read the first two (the app's send
    fails, so uvicorn drops the connection mid-body; a browser may drop what it had not read)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cut = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.cut or scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if scope["path"] != "/api/runs":
            await self.app(scope, receive, send)
            return
        self.cut = True
        chunks = 0

        async def cutting(message: Any) -> None:
            nonlocal chunks
            if message["type"] == "http.response.body" and message.get("body"):
                chunks += 1
                if chunks > 2:
                    await anyio.sleep(0.2)
                    raise OSError("the connection dropped")
            await send(message)

        await self.app(scope, receive, cutting)


async def test_the_page_streams_a_run_from_its_post_and_reads_on_after_a_drop() -> None:
    """A question is one request: the POST that starts the run answers with its stream. When
    that connection drops mid-run, the page reads on from the run's events URL with
    ``Last-Event-ID`` (one GET), and the reply shows once, in order."""
    users_seen: list[int] = []
    agent = Agent(_chat_model(users_seen), tools=[lookup], store=InMemoryStore())
    app = create_app(agent)
    async with serving(_CutFirstStream(app)) as base, _page(base) as page:  # type: ignore[arg-type]
        requests: list[tuple[str, str, dict[str, str]]] = []
        page.on("request", lambda r: requests.append((r.method, r.url, r.headers)))
        await _ask(page, QUESTIONS[0], 1)
        turns = await _turns(page)
        await _ask(page, QUESTIONS[1], 2)  # no drop: the POST alone
        second = (await _turns(page))[1]
    api = [(m, u.removeprefix(base), h) for m, u, h in requests if "/api/" in u]
    assert [(m, u) for m, u, _ in api] == [
        ("POST", "/api/runs"),
        ("GET", f"/api/runs/{api[1][1].split('/')[3]}/events"),
        ("POST", "/api/runs"),  # the second question: its POST, nothing else
    ]
    assert [h.get("accept") for m, _, h in api if m == "POST"] == ["text/event-stream"] * 2
    assert api[1][2].get("last-event-id", "").isdigit()  # read on from the last event seen
    kinds = [b.split(":")[0] for b in turns[0]["blocks"]]
    assert kinds == ["thought", "text", "action", "text", "text answer"], turns[0]["blocks"]
    assert sum("Let me check." in b for b in turns[0]["blocks"]) == 1  # nothing read twice
    assert len(turns[0]["answers"]) == 1 and turns[0]["outputs"] == ["→ Paris: 21°C, sunny"]
    assert second["answers"] == ["The second answer, with code."] and users_seen == [2]


@tool(requires_approval=True)
async def transfer(amount: int, to: str) -> str:
    """Send money.

    Args:
        amount: how much
        to: to whom
    """
    return f"sent {amount} to {to}"


async def test_the_page_approves_and_denies_waiting_calls_after_a_reload() -> None:
    """Two calls wait for approval and an external tool for its result; a reload shows them
    from the history, still waiting; one is approved, one denied and the result typed in on
    the page, and the run goes on in the same turn: each call one row, with its outcome, and
    the answer below."""

    def reply(request: ModelRequest) -> Reply:
        if request.messages[-1].role == "user":
            return Reply(
                text="I'll pay both.",
                calls=[
                    call("transfer", {"amount": 5, "to": "bob"}, id="to_bob"),
                    call("transfer", {"amount": 7, "to": "eve"}, id="to_eve"),
                    call("user_city", {}, id="city"),
                ],
            )
        return Reply(text="Paid **bob**; eve was denied.")

    city = Tool.external("user_city", "The user's city, from the page.", {"type": "object"})
    agent = Agent(FunctionModel(reply), tools=[transfer, city], store=InMemoryStore())
    async with serving(create_app(agent)) as base, _page(base) as page:
        posts: list[str | None] = []
        page.on(
            "request",
            lambda r: posts.append(r.headers.get("content-type")) if r.method == "POST" else None,
        )
        await page.fill("#input", "pay bob 5 and eve 7")
        await page.click("#send")
        await page.wait_for_function(
            "() => document.querySelectorAll('#chat .action button.approve').length === 2",
            timeout=15_000,
        )
        await page.reload()
        await page.wait_for_function(
            "() => document.querySelectorAll('#chat .action button.approve').length === 2",
            timeout=15_000,
        )
        await page.locator(".action", has_text="bob").locator("button.approve").click()
        await page.locator(".action", has_text="user_city").locator("input.result").fill("Lyon")
        await page.locator(".action", has_text="user_city").locator("button").click()
        await page.locator(".action", has_text="eve").locator("button.deny").click()
        await page.wait_for_selector("[data-testid=answer]", timeout=15_000)
        turns = await _turns(page)
        rows = await page.locator("#chat .action").all_text_contents()
        buttons = await page.locator("#chat .decide").count()
    assert [t["question"] for t in turns] == ["pay bob 5 and eve 7"]
    assert turns[0]["answers"] == ["Paid bob; eve was denied."] and turns[0]["strong"] == ["bob"]
    assert posts == ["application/json"] * 2  # the run and the resume (the server may insist)
    assert len(rows) == 3 and buttons == 0
    bob, eve, where = rows
    assert "sent 5 to bob" in bob and "approved" in bob
    assert "denied" in eve and "sent" not in eve
    assert "→ Lyon" in where
