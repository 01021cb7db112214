"""``agentloop serve tests.web._served:agent``: the demo agent on the emulated provider whose URL
the test passes in ``AGENTLOOP_TEST_PROVIDER_URL``."""

from __future__ import annotations

import os

from ._demo import demo_agent

agent = demo_agent(os.environ.get("AGENTLOOP_TEST_PROVIDER_URL", "http://127.0.0.1:9"))
