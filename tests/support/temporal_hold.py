"""A worker interceptor that holds a durable run's cut (continue-as-new) open, for tests that
must land a call inside it without racing: the run's memo ``{"hold": "cut"}`` holds a run that
has decided to continue as new before it does; ``{"hold": "start"}`` holds each continued run
before it takes up where the run before stopped. A held run answers the query ``test.held``
with ``True`` and goes on at the signal ``test.release`` (recorded: a replay with this
interceptor holds and goes on alike); ``test.refused`` counts the updates its validators
refused meanwhile (not recorded, as a refused update is not). ``StaleSignals`` sends a
caller's signal to the run before, as a signal racing the cut may reach it."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio import client, workflow
from temporalio.service import RPCError
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


class StaleSignals(client.Interceptor):
    """A client interceptor that sends the next signal (or update) meant for a workflow's
    current run to the run ``stale`` names (one that continued as new), as the server itself
    may route a signal that races a continue-as-new: the server answers it "already
    completed" (``refused`` keeps its errors). The sends after go as they are."""

    def __init__(self) -> None:
        self.stale: str | None = None
        self.refused: list[RPCError] = []

    def intercept_client(self, next: client.OutboundInterceptor) -> client.OutboundInterceptor:
        return _Stale(next, self)


class _Stale(client.OutboundInterceptor):
    def __init__(self, next: client.OutboundInterceptor, owner: StaleSignals) -> None:
        super().__init__(next)
        self._owner = owner

    async def signal_workflow(self, input: client.SignalWorkflowInput) -> None:
        stale, self._owner.stale = self._owner.stale, None
        if stale is None or input.run_id is not None:
            return await super().signal_workflow(input)
        try:
            return await super().signal_workflow(dataclasses.replace(input, run_id=stale))
        except RPCError as exc:
            self._owner.refused.append(exc)
            raise

    async def start_workflow_update(
        self, input: client.StartWorkflowUpdateInput
    ) -> client.WorkflowUpdateHandle[Any]:
        stale, self._owner.stale = self._owner.stale, None
        if stale is None or input.run_id is not None:
            return await super().start_workflow_update(input)
        try:
            return await super().start_workflow_update(dataclasses.replace(input, run_id=stale))
        except RPCError as exc:
            self._owner.refused.append(exc)
            raise
