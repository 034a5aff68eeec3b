"""poetsim.errors: every exception class poetsim raises on purpose lives there."""

from __future__ import annotations

import ast
from pathlib import Path

import poetsim
import poetsim.errors as errors


def test_every_public_exception_class_is_defined_in_errors():
    root = Path(poetsim.__file__).parent
    outside = []
    for path in root.rglob("*.py"):
        if path.name == "errors.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    isinstance(base, ast.Name) and base.id.endswith(("Error", "Exception"))
                    for base in node.bases):
                outside.append(f"{path.relative_to(root)}:{node.name}")
    assert outside == []


def test_every_error_is_a_poetsim_error():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.PoetsimError) or cls is errors.PoetsimWarning, name
