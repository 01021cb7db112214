"""A worker interceptor that holds a durable run's cut (continue-as-new) open, for tests that
must land a call inside it without racing: the run's memo ``{"hold": "cut"}`` holds a run that
has decided to continue as new before it does; ``{"hold": "start"}`` holds each continued run
before it takes up where the run before stopped. A held run answers the query ``test.held``
with ``True`` and goes on at the signal ``test.release`` (recorded: a replay with this
interceptor holds and goes on alike); ``test.refused`` counts the updates its validators
refused meanwhile (not recorded, as a refused update is not)."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

HELD_QUERY = "test.held"
REFUSED_QUERY = "test.refused"
RELEASE_SIGNAL = "test.release"


class HoldCuts(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Hold


class _Hold(WorkflowInboundInterceptor):
    held = False
    released = False
    refused = 0

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        workflow.set_query_handler(HELD_QUERY, lambda: self.held)
        workflow.set_query_handler(REFUSED_QUERY, lambda: self.refused)
        workflow.set_signal_handler(RELEASE_SIGNAL, self._release)
        hold = workflow.memo_value("hold", None)
        if hold == "start" and workflow.info().continued_run_id is not None:
            await self._held()
        try:
            return await super().execute_workflow(input)
        except workflow.ContinueAsNewError:
            if hold == "cut":
                await self._held()
            raise

    async def _held(self) -> None:
        self.held = True
        await workflow.wait_condition(lambda: self.released)
        self.held = False

    def _release(self) -> None:
        self.released = True

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        try:
            super().handle_update_validator(input)
        except Exception:
            self.refused += 1
            raise
