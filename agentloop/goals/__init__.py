"""Persistent session goals and their enforcement.

A goal is the contract that a multi-step task is really done: while a branch's goal is active,
a reply that merely looks final does not end the run. ``setup_goal(agent)`` adds the goal tools
and the enforcement middleware; ``start_goal`` sets a goal from the host side.
"""

from __future__ import annotations

from ._enforce import DEFAULT_GUIDANCE as DEFAULT_GUIDANCE
from ._enforce import DEFAULT_NUDGE as DEFAULT_NUDGE
from ._enforce import GoalEnforcement as GoalEnforcement
from ._enforce import GoalOptions as GoalOptions
from ._enforce import RetryEvent as RetryEvent
from ._enforce import setup_goal as setup_goal
from ._host import start_goal as start_goal
from ._record import GoalRecord as GoalRecord
from ._record import GoalStatus as GoalStatus
from ._record import get_goal_record as get_goal_record
from ._record import render_goal as render_goal
from ._tools import GoalToolSet as GoalToolSet

__all__ = [
    "DEFAULT_GUIDANCE",
    "DEFAULT_NUDGE",
    "GoalEnforcement",
    "GoalOptions",
    "GoalRecord",
    "GoalStatus",
    "GoalToolSet",
    "RetryEvent",
    "get_goal_record",
    "render_goal",
    "setup_goal",
    "start_goal",
]
