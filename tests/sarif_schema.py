"""Validation against the SARIF 2.1.0 JSON schema shipped in tests/report/ (it cannot be downloaded at test time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(__file__).parent / "report" / "sarif-schema-2.1.0.json"


def sarif_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def validate_sarif(log: dict[str, Any]) -> None:
    """Assert ``log`` is valid SARIF 2.1.0, naming the first errors."""
    errors = sorted(sarif_validator().iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
