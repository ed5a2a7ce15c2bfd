# tests/conformance/children.py
#
# Child programs for the tests whose failure is a hang, a spin or a process
# that never exits (timers at infinity, fork, exit): the test runs a short
# program in a fresh interpreter on the row's loop, with a timeout, so a
# failure is a failed test and never a stuck pytest.
#
# Rules this file keeps:
#   * The child makes the same loop as the row (conftest.loop_spec) and
#     imports nothing of the test's: its program is a string, read whole in
#     the test that runs it.
#   * A child that outlives its timeout is killed with its process group
#     (it may have forked), and the test fails saying so.

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from conformance.conftest import loop_spec

# Prepended to every child program: ``make_loop`` is the row's factory.
PRELUDE = """\
import asyncio, importlib, sys
_module, _, _factory = {spec!r}.partition(":")
make_loop = getattr(importlib.import_module(_module), _factory)
"""


def run_child(loop_name: str, program: str, *, timeout: float = 30.0,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``program`` (dedented) in a new interpreter with ``make_loop`` bound to the row's factory.

    Returns the finished process (stdout, stderr as text).  Fails the test
    (``pytest.fail``) if it runs longer than ``timeout`` seconds, after
    killing its whole process group.
    """
    import pytest

    code = PRELUDE.format(spec=loop_spec(loop_name)) + textwrap.dedent(program)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"the child program did not finish in {timeout} s\n"
                    f"stdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)
