"""Cases and datasets: built in code, read from YAML and JSON, and the published schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentloop import ImagePart, UserError
from agentloop.evals import (
    Case,
    Check,
    Contains,
    Dataset,
    SimulatedUser,
    ToolCallSpec,
    ToolTrajectory,
)

SCHEMA = Path(__file__).parents[2] / "agentloop" / "evals" / "dataset.schema.json"

YAML = """\
name: support
cases:
  - name: weather
    input: What is the weather in Paris?
    expected_tools:
      - name: weather
        args: {city: {$regex: "^Par"}}
    tags: [tools]
  - name: photo
    input:
      - What is in this picture?
      - {kind: image, url: "https://example.com/cat.png"}
    expected_output: a cat
  - name: two turns
    input: My name is Ada.
    turns: ["What is my name?"]
  - name: simulated
    user: {instructions: You want a refund., max_turns: 3, stop: THANKS}
evaluators:
  - {kind: contains, value: Paris, tags: [tools]}
  - {kind: tool_trajectory, mode: in_order}
"""


def test_a_yaml_dataset_loads_every_kind_of_case(tmp_path: Path) -> None:
    path = tmp_path / "support.yaml"
    path.write_text(YAML)
    dataset = Dataset.load(path)
    assert [c.name for c in dataset.cases] == ["weather", "photo", "two turns", "simulated"]
    weather, photo, turns, simulated = dataset.cases
    assert weather.expected_tools == [
        ToolCallSpec(name="weather", args={"city": {"$regex": "^Par"}})
    ]
    assert photo.input == ["What is in this picture?", ImagePart(url="https://example.com/cat.png")]
    assert turns.messages() == ["My name is Ada.", "What is my name?"]
    assert simulated.user == SimulatedUser(
        instructions="You want a refund.", max_turns=3, stop="THANKS"
    )
    assert dataset.evaluators == [
        Contains(value="Paris", tags=["tools"]),
        ToolTrajectory(mode="in_order"),
    ]
    assert dataset.evaluators[0].applies_to(weather)
    assert not dataset.evaluators[0].applies_to(photo)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_dataset_saves_and_loads_unchanged(tmp_path: Path, suffix: str) -> None:
    source = tmp_path / "support.yaml"
    source.write_text(YAML)
    dataset = Dataset.load(source)
    path = tmp_path / f"copy{suffix}"
    dataset.save(path)
    assert Dataset.load(path) == dataset


def test_a_file_without_a_name_is_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps({"cases": [{"name": "a", "input": "hi"}]}))
    assert Dataset.load(path).name == "smoke"


def test_code_only_evaluators_are_refused_by_a_file(tmp_path: Path) -> None:
    dataset = Dataset(
        cases=[Case(name="a", input="hi")], evaluators=[Check(lambda ctx: True, name="mine")]
    )
    with pytest.raises(UserError, match="mine"):
        dataset.save(tmp_path / "x.yaml")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cases": [{"name": "a"}]}, "no input"),
        ({"cases": [{"name": "a", "input": "x"}, {"name": "a", "input": "y"}]}, "two cases"),
        ({"cases": [{"name": "a", "input": "x", "inptu": 1}]}, "inptu"),
        ({"cases": [{"name": "a", "input": "x"}], "evaluators": [{"kind": "nope"}]}, "nope"),
        (
            {"cases": [{"name": "a", "turns": ["x"], "user": {"instructions": "i"}}]},
            "not both",
        ),
    ],
)
def test_a_wrong_dataset_says_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Dataset.model_validate(data)


def test_broken_yaml_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("cases: [\n")
    with pytest.raises(UserError, match="not valid YAML"):
        Dataset.load(path)


def test_select_keeps_cases_by_tag_and_name() -> None:
    dataset = Dataset(
        cases=[
            Case(name="a", input="x", tags=["fast"]),
            Case(name="b", input="x", tags=["slow"]),
            Case(name="c", input="x", tags=["fast"]),
        ]
    )
    assert [c.name for c in dataset.select(tags=["fast"]).cases] == ["a", "c"]
    assert [c.name for c in dataset.select(tags=["fast"], names=["c"]).cases] == ["c"]


def test_the_checked_in_schema_is_the_models_schema() -> None:
    """agentloop/evals/dataset.schema.json is published for editors; regenerate it with
    `python -m agentloop.evals.schema` when the models change."""
    assert json.loads(SCHEMA.read_text()) == Dataset.json_schema()


def test_the_schema_describes_the_evaluators_by_kind() -> None:
    schema = Dataset.json_schema()
    kinds = {
        d["properties"]["kind"]["const"]
        for d in schema["$defs"].values()
        if "kind" in d.get("properties", {}) and "const" in d["properties"]["kind"]
    }
    assert {"equals", "contains", "regex", "output_valid", "tool_trajectory", "budget"} <= kinds
    assert {"goal", "llm_judge", "has_span", "span_count"} <= kinds
