"""A ``Dataset`` of cases and evaluators, built in code or read from YAML or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import UserError
from ._base import Builtin
from ._case import Case
from ._spec import EvaluatorSpec


class Dataset(BaseModel):
    """Cases and the evaluators that score every one of them.

    ``Dataset.load("cases.yaml")`` reads YAML or JSON (by the file's suffix);
    ``Dataset.json_schema()`` is the schema those files follow.

    Attributes:
        name: Names the dataset in reports.
        cases: The cases (their names unique).
        evaluators: Evaluators run on every case.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = "dataset"
    cases: list[Case]
    evaluators: list[EvaluatorSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> Dataset:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}")
            seen.add(case.name)
        return self

    @classmethod
    def load(cls, path: str | Path) -> Dataset:
        """Read a dataset from a ``.yaml``/``.yml`` or ``.json`` file.

        Args:
            path: The file.
        """
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        try:
            data = _yaml().safe_load(text) if _is_yaml(path) else json.loads(text)
        except ValueError as exc:
            raise UserError(f"{path}: not valid JSON: {exc}") from None
        except Exception as exc:  # yaml.YAMLError: no import of yaml here
            if type(exc).__module__.startswith("yaml"):
                raise UserError(f"{path}: not valid YAML: {exc}") from None
            raise
        if isinstance(data, dict) and "name" not in data:
            data = {"name": path.stem, **data}
        return cls.model_validate(data)

    def save(self, path: str | Path) -> None:
        """Write the dataset as YAML or JSON (by the file's suffix), with a ``$schema`` line
        for editors when JSON.

        Args:
            path: The file.
        """
        path = Path(path)
        custom = [e.name for e in self.evaluators if not isinstance(e, Builtin)]
        if custom:
            raise UserError(
                f"a dataset file holds built-in evaluators only, not {', '.join(custom)}: pass "
                "those to evaluate(evaluators=...)"
            )
        # Not exclude_defaults: a discriminator (``kind``) is a default, and must stay.
        data = self.model_dump(mode="json", exclude_none=True)
        for entry in (*data["cases"], *data["evaluators"]):
            for key in ("turns", "metadata", "tags"):
                if entry.get(key) in ([], {}):
                    del entry[key]
            for call in entry.get("expected_tools") or entry.get("calls") or ():
                if call.get("args_mode") == "subset":
                    del call["args_mode"]
        if _is_yaml(path):
            text = _yaml().safe_dump(data, sort_keys=False, allow_unicode=True)
        else:
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of dataset files (``agentloop/evals/dataset.schema.json``)."""
        schema = cls.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = "agentloop evals dataset"
        return schema

    def select(self, *, tags: Sequence[str] = (), names: Sequence[str] = ()) -> Dataset:
        """The cases with any of ``tags`` and, when given, one of ``names``.

        Args:
            tags: Keep cases with at least one of these tags (none: any).
            names: Keep cases with one of these names (none: any).
        """
        cases = [
            c
            for c in self.cases
            if (not tags or set(tags) & set(c.tags)) and (not names or c.name in names)
        ]
        return self.model_copy(update={"cases": cases})


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def _yaml() -> Any:
    try:
        import yaml  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise UserError(
            "YAML datasets need PyYAML: pip install 'agentloop-runtime[evals]'"
        ) from None
    return yaml
