"""``python -m agentloop.evals.schema``: write ``dataset.schema.json`` (the JSON Schema of
dataset files) beside this module, or to the path given."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ._dataset import Dataset

SCHEMA_FILE = Path(__file__).with_name("dataset.schema.json")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else SCHEMA_FILE
    path.write_text(json.dumps(Dataset.json_schema(), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
