"""A page on another site, in a real browser, tries to drive a local ``agentloop serve`` through
the user's browser (DESIGN §8, "loopback is not a wall"): Debian's headless Chromium, driven by
Playwright with the system executable, loads an attacker's page from another origin on this
machine. Its simple cross-site POSTs, ``no-cors`` fetches, a beacon and a ``text/plain`` form
start nothing, and its forged decisions (through AG-UI and the resume endpoint, given the
session and the pending call's ids) approve nothing. A page whose name was rebound to 127.0.0.1
(``--host-resolver-rules``) is not served at all."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from agentloop import Agent, tool
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import InMemoryStore
from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn, ProviderServer
from agentloop.web import create_app

from ._serving import frames, serving
from .test_browser import _chromium

# Chromium is heavy by nature: the whole module is slow, left out of the fast loop.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),  # Playwright's and uvicorn's
]

ATTACK = """<!doctype html><meta charset="utf-8"><title>cute cats</title>
<form id="form" method="POST" action="VICTIM/api/runs" enctype="text/plain" target="sink">
<input name='{"input": "forged by a form", "x": "' value='"}'></form>
<iframe name="sink" id="sink"></iframe>
<script>
const V = "VICTIM", SESSION = "SESSION_ID", CALL = "CALL_ID";
const run = JSON.stringify({input: "forged by a fetch"});
const agui = (body) => JSON.stringify(Object.assign(
  {runId: "r", tools: [], context: [], state: {}, forwardedProps: {}}, body));
async function attack() {
  const sent = [
    fetch(V + "/api/runs", {method: "POST", mode: "no-cors", body: run}),
    fetch(V + "/api/runs", {method: "POST", headers: {"content-type": "text/plain"}, body: run}),
    fetch(V + "/api/runs", {method: "POST", mode: "no-cors",
                            headers: {"content-type": "application/json"}, body: run}),
    fetch(V + "/api/runs", {method: "POST", headers: {"content-type": "application/json"},
                            body: run}),
    fetch(V + "/api/ag-ui", {method: "POST", mode: "no-cors", body: agui({threadId: "forged-thread",
          messages: [{id: "m", role: "user", content: "forged through AG-UI"}]})}),
    fetch(V + "/api/ag-ui", {method: "POST", mode: "no-cors", body: agui({threadId: SESSION,
          messages: [], resume: [{interruptId: CALL, status: "resolved", payload: true}]})}),
    fetch(V + "/api/sessions/" + SESSION + "/resume", {method: "POST", mode: "no-cors",
          body: JSON.stringify({decisions: {[CALL]: {decision: "approve"}}})}),
    fetch(V + "/api/chat", {method: "POST", mode: "no-cors", body: JSON.stringify({
          id: "forged-chat", messages: [{id: "m", role: "user",
          parts: [{type: "text", text: "forged through the chat"}]}]})}),
  ];
  const beacon = navigator.sendBeacon(V + "/api/runs", run);
  const settled = await Promise.allSettled(sent);
  const loaded = new Promise((done) => document.getElementById("sink").onload = done);
  document.getElementById("form").submit();
  await loaded;
  return {beacon, settled: settled.map((s) => s.status)};
}
</script>"""


@pytest.fixture
async def attacker() -> AsyncIterator[Any]:
    """A site of its own: another origin (another port) on this machine, so that the browser's
    rules for public pages reaching local ones do not stop it before the server must."""
    page: dict[str, str] = {}

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(page["html"])

    async with serving(Starlette(routes=[Route("/", index)])) as base:
        yield base, page


async def test_a_page_on_another_origin_starts_nothing_and_approves_nothing(
    attacker: tuple[str, dict[str, str]],
) -> None:
    executable = _chromium()
    playwright_api = pytest.importorskip("playwright.async_api")
    ran: list[int] = []

    @tool(requires_approval=True)
    async def transfer(amount: int, to: str) -> str:
        """Send money.

        Args:
            amount: how much
            to: to whom
        """
        ran.append(amount)
        return f"sent {amount} to {to}"

    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("transfer", {"amount": 5, "to": "mallory"})]),
        "Paid.",
    ]
    attack_base, attack_page = attacker
    store = InMemoryStore()
    async with ProviderServer(EmulatedProvider(script=script)) as provider:
        model = OpenAIChatModel("emulated", base_url=provider.url + "/v1", api_key="k")
        agent = Agent(model, tools=[transfer], store=store)
        app = create_app(agent)
        async with (
            model,
            serving(app) as base,
            httpx2.AsyncClient(base_url=base, timeout=30) as client,
            playwright_api.async_playwright() as pw,
        ):
            started = (await client.post("/api/runs", json={"input": "pay mallory 5"})).json()
            async with client.stream("GET", started["events"]) as response:
                waiting = [f.json() for f in await frames(response)][-1]
            assert waiting["type"] == "run_waiting", waiting
            call = waiting["result"]["pending"][0]["id"]
            model_calls = len(provider.requests)
            attack_page["html"] = (
                ATTACK.replace("VICTIM", base)
                .replace("SESSION_ID", started["session"])
                .replace("CALL_ID", call)
            )
            browser = await pw.chromium.launch(
                executable_path=executable,
                args=["--no-sandbox", "--host-resolver-rules=MAP rebound.test 127.0.0.1"],
                headless=True,
            )
            try:
                page = await browser.new_page()
                await page.goto(attack_base)
                outcome = await page.evaluate("attack()")
                port = base.rsplit(":", 1)[1]
                rebound = await page.goto(f"http://rebound.test:{port}/")
                rebound_status = None if rebound is None else rebound.status
            finally:
                await browser.close()
            await anyio.sleep(0.5)  # anything forged would have started by now
            runs = list(app.state.hub._logs)
            forged = [await store.get(s) for s in ("forged-thread", "forged-chat")]
            calls_after = len(provider.requests)
            print(json.dumps(outcome))
            assert outcome["settled"][0] == outcome["settled"][2] == "fulfilled"  # sent
            assert ran == [], "a forged approval ran the tool"
            assert runs == [started["run"]], "a forged request started a run"
            assert forged == [None, None]
            assert calls_after == model_calls
            assert rebound_status == 400
            # The session is intact: its owner (no Origin: not a browser) still decides it.
            decided = await client.post(
                f"/api/sessions/{started['session']}/resume",
                json={"decisions": {call: {"decision": "approve"}}},
            )
            async with client.stream("GET", decided.json()["events"]) as response:
                last = [f.json() for f in await frames(response)][-1]
    assert ran == [5]  # once, when the owner approved
    assert last["type"] == "run_finished" and last["result"]["output"] == "Paid."
