"""The trajectory matchers against brute force, on small random trajectories."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import ActionResult
from agentloop.evals import ToolCallSpec
from agentloop.evals._trajectory import _any_order, _in_order, call_matches

NAMES = st.sampled_from(["a", "b", "c"])
# A spec names a tool and, half the time, an argument: a loose spec and a strict one can
# compete for the same call.
SPECS = st.lists(
    st.builds(
        lambda name, x: ToolCallSpec(name=name, args=None if x is None else {"x": x}),
        NAMES,
        st.one_of(st.none(), st.integers(0, 1)),
    ),
    max_size=5,
)
CALLS = st.lists(
    st.builds(
        lambda name, x: ActionResult(tag="t", name=name, input={"x": x}), NAMES, st.integers(0, 1)
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(SPECS, CALLS)
def test_in_order_is_the_longest_matching_subsequence(
    specs: list[ToolCallSpec], calls: list[ActionResult]
) -> None:
    best = 0
    for k in range(len(specs), 0, -1):
        for chosen in itertools.combinations(range(len(specs)), k):
            for picked in itertools.combinations(range(len(calls)), k):
                if all(
                    call_matches(specs[i], calls[j]) for i, j in zip(chosen, picked, strict=True)
                ):
                    best = k
                    break
            if best:
                break
        if best:
            break
    assert _in_order(specs, calls) == best


@settings(max_examples=300, deadline=None)
@given(SPECS, CALLS)
def test_any_order_is_a_maximum_matching(
    specs: list[ToolCallSpec], calls: list[ActionResult]
) -> None:
    best = 0
    for k in range(min(len(specs), len(calls)), 0, -1):
        if any(
            all(call_matches(specs[i], calls[j]) for i, j in zip(chosen, perm, strict=True))
            for chosen in itertools.combinations(range(len(specs)), k)
            for perm in itertools.permutations(range(len(calls)), k)
        ):
            best = k
            break
    assert _any_order(specs, calls) == best
