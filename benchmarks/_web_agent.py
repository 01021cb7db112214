"""The agent ``bench_web`` serves with ``agentloop serve benchmarks._web_agent:agent``: no tools,
so the emulated provider (``AGENTLOOP_BENCH_PROVIDER_URL``) answers at once, streamed."""

from __future__ import annotations

import os

from agentloop import Agent
from agentloop.models.openai import OpenAIChatModel

_URL = os.environ.get("AGENTLOOP_BENCH_PROVIDER_URL", "http://127.0.0.1:9")
agent = Agent(OpenAIChatModel("emulated", base_url=_URL + "/v1", api_key="bench"), name="bench")
