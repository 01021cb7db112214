"""A ``resume_state`` a client holds (the approvals guide's cookie): replaying a bare one runs
an approved tool again, so ``ResumeSealer`` signs it with the application's key and gives it a
nonce used once. A changed, foreign, expired or second-time state is refused, and the tool runs
once."""

from __future__ import annotations

import pytest

from agentloop import Agent, Approve, ResumeSealer, UsedNonces, UserError, tool
from agentloop.testing import Reply, ScriptedModel, call

KEY = b"k" * 32


def _agent(ran: list[int]) -> Agent[None, str]:
    @tool(requires_approval=True)
    async def transfer(amount: int) -> str:
        """Move money.

        Args:
            amount: How much.
        """
        ran.append(amount)
        return f"sent {amount}"

    model = ScriptedModel([Reply(calls=[call("transfer", {"amount": 5}, id="a")]), "done"] * 3)
    return Agent(model, tools=[transfer])


async def test_a_bare_resume_state_replayed_runs_the_tool_again() -> None:
    """The attack: nothing in a bare state says it was used."""
    ran: list[int] = []
    agent = _agent(ran)
    state = (await agent.run("pay")).resume_state
    assert state is not None
    for _ in range(2):
        await agent.resume(resume_state=state, decisions={"a": Approve()})
    assert ran == [5, 5]


async def test_a_sealed_state_resumes_once_and_a_changed_one_never() -> None:
    ran: list[int] = []
    agent = _agent(ran)
    sealer = ResumeSealer(KEY)
    waiting = await agent.run("pay")
    assert waiting.resume_state is not None
    sealed = sealer.seal(waiting.resume_state)
    body, mac = sealed.split(".")
    forged = [
        body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac,
        ResumeSealer(b"x" * 32).seal(waiting.resume_state),
        "not-a-sealed-state",
    ]
    for bad in forged:
        with pytest.raises(UserError, match="changed or sealed with another key"):
            await sealer.open(bad)
    done = await agent.resume(resume_state=await sealer.open(sealed), decisions={"a": Approve()})
    with pytest.raises(UserError, match="used before"):
        await sealer.open(sealed)
    assert done.output == "done" and ran == [5]


async def test_expired_states_and_a_full_cache_refuse_rather_than_forget() -> None:
    now = [1_000.0]
    nonces = UsedNonces(max_entries=2, clock=lambda: now[0])
    sealer = ResumeSealer(KEY, nonces=nonces, max_age=60, clock=lambda: now[0])
    first = sealer.seal({"v": 1})
    now[0] += 1
    later = [sealer.seal({"v": n}) for n in (2, 3)]
    now[0] += 1
    newest = sealer.seal({"v": 4})
    opened = [await sealer.open(s) for s in later]  # fills the cache
    assert await sealer.open(newest) == {"v": 4}  # forgets the oldest nonce…
    with pytest.raises(UserError, match="used before"):
        await sealer.open(later[0])  # …and refuses what was sealed no later than it
    with pytest.raises(UserError, match="used before"):
        await sealer.open(first)  # sealed earlier still: refused, though never opened
    stale = sealer.seal({"v": 5})
    now[0] += 61
    with pytest.raises(UserError, match="expired"):
        await sealer.open(stale)
    assert opened == [{"v": 2}, {"v": 3}]


def test_a_short_key_is_refused() -> None:
    with pytest.raises(UserError, match="16 bytes"):
        ResumeSealer(b"short")
