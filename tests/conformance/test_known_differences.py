# tests/conformance/test_known_differences.py
#
# The suite's own bookkeeping: every ``differs`` mark in tests/conformance/
# has its reason quoted in KNOWN_DIFFERENCES.md, so the list a reader gets is
# the list the suite enforces.  Found by reading the test files' syntax
# trees, not by running them.

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _differs_reasons() -> dict[str, str]:
    """Every ``differs(reason=...)`` in this package's tests: reason -> where."""
    reasons = {}
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "differs"):
                for keyword in node.keywords:
                    if keyword.arg == "reason":
                        reasons[ast.literal_eval(keyword.value)] = f"{path.name}:{node.lineno}"
    return reasons


def test_every_known_difference_is_listed_with_its_reason():
    listed = " ".join((HERE / "KNOWN_DIFFERENCES.md").read_text().split())
    reasons = _differs_reasons()
    assert reasons  # the scan found the marks
    missing = {reason: where for reason, where in reasons.items() if reason not in listed}
    assert missing == {}
