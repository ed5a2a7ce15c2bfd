"""The boundary around a check graded for credit (tinyloop/exercises/sandbox.py,
outcomes.py and checker.check(sandboxed=True)), tried with the hostile
submissions a class hands in, each written as a student would, on a real
exercise (run-once: its own tests take seconds, and its stage's server runs
the file in processes of its own):

  * a report forged from inside: a passing JUnit file written into the
    check's temporary folder, forged outcomes on the checker's pipe, exit 0;
  * a detached child (setsid(), then a long sleep);
  * a file deleted through a shell command;
  * a fork bomb, a memory hog;
  * a hang inside C (libuv's uv_run, which retries epoll_wait on EINTR, so
    pytest-timeout's signal never reaches Python);
  * a listener on a fixed port, in two checks at once.

Each must get the right verdict with its reason, and leave nothing behind:
no process (psutil), the canary files intact.  The tests that need no
sandbox (the student's own check with the guard, the kept test ids) run
everywhere.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tinyloop.exercises import catalog, checker, markers, outcomes, sandbox

WHY = sandbox.available()
needs_sandbox = pytest.mark.skipif(WHY is not None, reason=f"no sandbox here: {WHY}")

EXERCISE = catalog.get("run-once")
# In the test process, the student's module is loaded by the checker's
# ``python -c`` before pytest starts; in a server, by ``python -m tinyloop serve``.
IN_TESTS = 'import sys\nIN_TESTS = sys.argv[0] == "-c"\n'


def solution(tmp_path: Path, name: str, *, wrong: bool = False, prologue: str = "",
             in_run_ready: str = "") -> Path:
    """The reference solution of run-once, as a student's file ``name``: ``wrong``
    runs the ready queue last-in first-out (its own tests fail), ``prologue`` is
    code run when the module is loaded (at its end), ``in_run_ready`` first in step 4."""
    text = markers.reference(EXERCISE, name)
    good = "            handle = self._ready.popleft()\n"
    assert good in text
    if wrong:
        text = text.replace(good, "            handle = self._ready.pop()\n")
    if in_run_ready:
        marker = "        # exercise run-once: begin\n        for _ in range(len(self._ready)):\n"
        assert marker in text
        body = "".join(f"        {line}\n" for line in in_run_ready.splitlines())
        text = text.replace(marker, marker.replace("        for", body + "        for"))
    path = tmp_path / name
    path.write_text(text + "\n" + IN_TESTS + prologue)  # run last when the module loads
    return path


def check(path: Path, **kw) -> checker.Report:
    return checker.check(EXERCISE, path, quick=True, sandboxed=True, **kw)


def _running_command(process: psutil.Process) -> str | None:
    """``process``'s command line, or None when nothing runs in it any more: it
    ended meanwhile, or is a zombie (dead, left for its parent to reap; another
    test in this worker may have one)."""
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return " ".join(process.cmdline())
    except psutil.Error:
        return None


_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before_the_test():
    """The pids this worker had as descendants before the test: its own helpers
    (multiprocessing's resource tracker, started once by another test in this
    worker and kept for its life) are not what a check left behind."""
    _BEFORE.clear()
    _BEFORE.update(p.pid for p in psutil.Process().children(recursive=True))
    yield


def left_behind(mark: str | None = None) -> list[str]:
    """What a check left running: any process descended from this one (the
    sandboxes, and all in them, are) since the test began, and any whose
    command line holds ``mark``."""
    found = [line for line in map(_running_command, [p for p in psutil.Process().children(recursive=True)
                                                      if p.pid not in _BEFORE]) if line]
    if mark is not None:
        found += [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
                  if mark in " ".join(p.info["cmdline"] or [])]
    return found


@needs_sandbox
@pytest.mark.parametrize("checkout", ["/check/work/main", "/proc/self"])
def test_a_checkout_the_sandbox_would_hide_is_refused_by_name(monkeypatch, checkout):
    # CI clones into /check/work/main; the sandbox's own folder was once /check,
    # and every sandboxed check failed there with "Can't chdir".  A checkout
    # under the sandbox's own folders must be refused by name, not lost.
    if not os.path.exists(checkout):
        monkeypatch.setattr(os.path, "exists", lambda p, exists=os.path.exists: p == checkout or exists(p))
    monkeypatch.setattr(sandbox, "repository_root", lambda: checkout)
    sandbox.available.cache_clear()
    sandbox.read_only_paths.cache_clear()
    try:
        bound = sandbox.read_only_paths()
        why = sandbox.available() if checkout not in bound else None  # a path bwrap can't bind if made up
    finally:
        monkeypatch.undo()
        sandbox.available.cache_clear()
        sandbox.read_only_paths.cache_clear()
    if checkout.startswith("/check/"):
        assert checkout in bound
    else:
        assert why is not None and "/proc/" in why and "move it" in why


@needs_sandbox
def test_available_says_yes_here_and_builds_the_boundary(tmp_path):
    # The boundary itself, on a plain program: its user, loopback, namespaces, limits.
    probe = ("import os, resource, socket\n"
             "print(os.getuid(), os.getpid(), os.environ['HOME'], sorted(socket.if_nameindex())[0][1])\n"
             "print(resource.getrlimit(resource.RLIMIT_NPROC)[0], resource.getrlimit(resource.RLIMIT_AS)[0])\n"
             "for target in ('/usr/x', os.environ['TINYLOOP_ROOT'] + '/x'):\n"
             "    try:\n        open(target, 'w')\n    except OSError as e:\n        print(e.errno)\n"
             "import multiprocessing\nmultiprocessing.Lock()\nprint('semaphores')\n")
    proc = sandbox.popen([sys.executable, "-c", probe], env={"TINYLOOP_ROOT": str(checker.repository_root())},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    lines = out.decode().split("\n")
    uid, pid, home, interface = lines[0].split()
    # Under a root grader, a uid of its own; else the grader's own user.
    assert int(uid) in sandbox._UIDS if os.geteuid() == 0 else int(uid) == os.getuid(), out
    assert int(pid) <= 3 and home == "/tmp" and interface == "lo", out  # its own PID and network namespaces
    assert lines[1] == f"{sandbox.LIMITS.processes} {sandbox.LIMITS.memory_bytes}", out
    assert lines[2:4] == ["30", "30"], (out, err)  # EROFS: the system and the checkout are read-only
    assert lines[4] == "semaphores", (out, err)  # multiprocessing's locks: a /dev/shm of its own


@needs_sandbox
def test_no_other_process_of_the_user_can_write_on_the_outcome_pipe():
    # A server a test starts runs the student's code as the test process's
    # user.  It cannot reopen the test process's end of the pipe through
    # /proc/PID/fd: the plugin makes that process non-dumpable (tried on a
    # pipe the sandbox's user owns, which it could reopen otherwise), and
    # under a root grader the checker's pipe is root's, mode 0600.
    channel = outcomes.Channel()
    probe = (
        "import os, subprocess, sys\n"
        "from tinyloop.exercises import outcomes\n"
        "theirs = os.environ[outcomes.ENV]\n"
        "read, write = os.pipe()\n"
        "os.environ[outcomes.ENV] = str(write)\n"
        "outcomes.pytest_configure(None)\n"
        "child = 'import sys\\nfor p in sys.argv[1:]:\\n    try:\\n        open(p, \"w\")\\n"
        "    except OSError as e:\\n        print(e.errno)\\n    else:\\n        print(\"opened\")'\n"
        "me = f'/proc/{os.getpid()}/fd/'\n"
        "subprocess.run([sys.executable, '-c', child, me + str(write), me + theirs])\n"
        "outcomes._send({'start': 'probe'})\n"
        "print(os.read(read, 100).decode().strip())\n")
    parent = str(checker.repository_root())
    proc = sandbox.popen([sys.executable, "-c", probe], env={"PYTHONPATH": parent, **channel.env},
                         pass_fds=channel.pass_fds, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    channel.started_writer()
    out, err = proc.communicate(timeout=60)
    channel.finish()
    lines = out.decode().splitlines()
    assert lines[0] == str(errno.EACCES), (out, err)  # non-dumpable
    if os.geteuid() == 0:
        assert lines[1] == str(errno.EACCES), (out, err)  # root's pipe
    assert lines[2] == '{"start": "probe"}', (out, err)  # while the plugin itself writes


@needs_sandbox
@pytest.mark.parametrize("sandboxed", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["sandboxed", "unsandboxed-for-credit"])
def test_a_report_forged_from_inside_earns_nothing(tmp_path, sandboxed):
    # The student's wrong file, loaded in the test process before pytest runs,
    # writes a passing JUnit report wherever the check's files may be, forges
    # outcomes on the checker's pipe for the test it knows fails, and leaves
    # with exit status 0 before any test has run.
    forged_test = "tests/test_exercise_callbacks.py::test_run_once_runs_exactly_the_callbacks_ready_now"
    prologue = f'''
import glob, json, os
if IN_TESTS:
    junit = ('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1" failures="0" '
             'errors="0"><testcase classname="tests.test_exercise_callbacks" '
             'name="test_run_once_runs_exactly_the_callbacks_ready_now"/></testsuite></testsuites>')
    tmp = os.environ.get("TMPDIR", "/tmp")
    for folder in [tmp, *glob.glob(tmp + "/*"), *glob.glob({sandbox.FOLDER + "/*"!r})]:
        try:
            with open(os.path.join(folder, "junit.xml"), "w") as out:
                out.write(junit)
        except OSError:
            pass
    fd = os.environ.get("TINYLOOP_OUTCOME_FD")
    if fd:
        lines = [{{"collected": [{forged_test!r}]}}, {{"start": {forged_test!r}}}]
        lines += [{{"id": {forged_test!r}, "when": w, "outcome": "passed"}} for w in ("setup", "call", "teardown")]
        lines += [{{"exit": 0}}]
        os.write(int(fd), "".join(json.dumps(x) + "\\n" for x in lines).encode())
    os._exit(0)
'''
    # Unsandboxed, the ids collected first are what defeats it (grade --unsandboxed).
    report = checker.check(EXERCISE, solution(tmp_path, "run-once.py", wrong=True, prologue=prologue),
                           quick=True, sandboxed=sandboxed, collect_first=True)
    text = report.render()
    assert not report.passed, text
    step = next(s for s in report.steps if s.status == "FAIL")
    assert step.text == "the tests stopped before they all ran", text
    # The parent collected the exercise's tests itself: 5, of which 4 never reported.
    assert "4 of the 5 tests never reported" in "\n".join(step.details), text
    assert not left_behind()


@needs_sandbox
@pytest.mark.slow
def test_a_harness_made_to_pass_every_test_is_caught_by_the_canary(tmp_path):
    # The student's module is loaded into the test process, and code there can
    # change pytest itself: this wrong file makes every test a no-op that
    # passes.  Every expected test then reports a pass on the checker's own
    # pipe, by the real plugin; the checker's canary, a test that must fail
    # with a nonce, passes too, and gives the forgery away.
    prologue = """
if IN_TESTS:
    import _pytest.python
    _pytest.python.Function.runtest = lambda self: None
"""
    report = check(solution(tmp_path, "run-once.py", wrong=True, prologue=prologue), verdict_only=True)
    assert not report.passed
    failed = [step for step in report.steps if step.status == "FAIL"]
    assert failed[0].text.startswith("the test harness was changed"), report.render()
    assert "reported passed" in failed[0].details[0]
    # The same wrong file without the patch fails on its own test; the right one passes.
    honest = check(solution(tmp_path, "run-once.py", wrong=True), verdict_only=True)
    assert not honest.passed and "canary" not in honest.render()
    right = check(solution(tmp_path, "run-once.py"), verdict_only=True)
    assert right.passed, right.render()


@needs_sandbox
def test_the_limit_code_that_spares_the_canary_can_still_forge_a_pass(tmp_path):
    # What the sandbox does not promise (chapters/teachers.md says so): code in
    # the test process that knows of the canary can run it for real and no
    # other test.  If this test fails, the hole is closed: change the
    # teachers' page with it.
    prologue = """
if IN_TESTS:
    import _pytest.python
    real = _pytest.python.Function.runtest
    _pytest.python.Function.runtest = lambda self: real(self) if "canary" in self.name else None
"""
    report = check(solution(tmp_path, "run-once.py", wrong=True, prologue=prologue), verdict_only=True)
    assert report.passed, report.render()


@needs_sandbox
def test_a_detached_child_is_ended_with_the_check(tmp_path):
    mark = "3141.59"
    prologue = f'''
import os
if IN_TESTS and os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "{mark}"])
'''
    report = check(solution(tmp_path, "run-once.py", prologue=prologue))
    assert report.passed, report.render()  # its tests pass: the child harms nothing, and is gone
    assert not left_behind(mark)


@needs_sandbox
@pytest.mark.slow
def test_a_file_deleted_through_a_shell_command_is_still_there(tmp_path):
    # Two canaries: one the sandbox cannot see (the host's /tmp), one it sees
    # read-only (in the checkout, under build/, which git ignores).
    hidden = tmp_path / "canary.txt"
    hidden.write_text("keep me")
    build = checker.repository_root() / "build"
    build.mkdir(exist_ok=True)
    seen = build / f"canary-{os.getpid()}.txt"
    seen.write_text("keep me too")
    try:
        prologue = f'''
import os
if IN_TESTS:
    os.system("rm -rf {hidden} {seen} {checker.repository_root()}/tinyloop/callbacks/loop.py")
'''
        report = check(solution(tmp_path, "run-once.py", prologue=prologue))
        assert report.passed, report.render()
        assert hidden.read_text() == "keep me" and seen.read_text() == "keep me too"
        assert (checker.repository_root() / "tinyloop/callbacks/loop.py").is_file()
    finally:
        seen.unlink()


@needs_sandbox
@pytest.mark.slow
def test_a_fork_bomb_fails_and_ends(tmp_path, monkeypatch):
    # A lower process limit than a class's, to spare the machine the test runs on.
    monkeypatch.setattr(sandbox, "LIMITS", dataclasses.replace(sandbox.LIMITS, processes=128))
    prologue = '''
import os
if IN_TESTS:
    while True:
        os.fork()
'''
    started = time.monotonic()
    report = check(solution(tmp_path, "run-once.py", prologue=prologue))
    text = report.render()
    assert not report.passed and time.monotonic() - started < 120, text
    # fork() fails at the sandbox's process limit: the file fails on import.
    assert "your file fails when it is imported" in text and "BlockingIOError" in text, text
    assert not left_behind()


@needs_sandbox
def test_a_memory_hog_fails_with_memory_error(tmp_path):
    report = check(solution(tmp_path, "run-once.py", in_run_ready="cache = bytearray(16 << 30)"))
    text = report.render()
    assert not report.passed and "MemoryError" in text, text
    assert "test_run_once_runs_exactly_the_callbacks_ready_now" in text, text
    assert not left_behind()


@needs_sandbox
def test_a_crash_in_the_sandbox_reads_as_a_crash(tmp_path):
    # bwrap passes the signal on as its exit status, 128 + its number.
    report = check(solution(tmp_path, "run-once.py", in_run_ready="import ctypes\nctypes.string_at(0)"),
                   verdict_only=True)
    text = report.render()
    assert "CRASHED (SIGSEGV) in test_run_once_runs_exactly_the_callbacks_ready_now" in text, text
    assert not left_behind()


# A wait inside libuv, as a student who tried to block in uv_run for the next
# event would write it: uv_run retries epoll_wait on EINTR inside C, so the
# SIGALRM of pytest-timeout never runs its Python handler.
WAIT_IN_LIBUV = """\
import ctypes
uv = ctypes.CDLL("libuv.so.1")
uv.uv_default_loop.restype = ctypes.c_void_p
loop = ctypes.c_void_p(uv.uv_default_loop())
timer = ctypes.create_string_buffer(1024)
uv.uv_timer_init(loop, timer)
callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda handle: None)
uv.uv_timer_start(timer, callback, ctypes.c_uint64(10 ** 9), ctypes.c_uint64(0))
uv.uv_run(loop, 0)
"""


@needs_sandbox
def test_a_hang_inside_c_is_stopped_from_outside_and_named(tmp_path, monkeypatch):
    try:
        import ctypes
        ctypes.CDLL("libuv.so.1")
    except OSError:
        pytest.skip("no libuv.so.1 here")
    monkeypatch.setattr(checker, "TEST_TIMEOUT", 2.0)
    monkeypatch.setattr(checker, "HANG_GRACE", 3.0)
    started = time.monotonic()
    report = check(solution(tmp_path, "run-once.py", in_run_ready=WAIT_IN_LIBUV), verdict_only=True)
    took = time.monotonic() - started
    text = report.render()
    assert not report.passed and took < 60, text
    step = next(s for s in report.steps if s.status == "FAIL")
    assert step.text == "a test was still running after 5 s, and the checker stopped it", text
    assert step.details[0].startswith("tests/test_exercise_callbacks.py::test_run_once_"), text
    assert not left_behind()


@needs_sandbox
@pytest.mark.slow
def test_two_checks_listening_on_one_fixed_port_both_pass(tmp_path):
    # Each check listens on the port the host holds already: each has a
    # loopback of its own.  And each tries to reach a listener of the host,
    # which hears nothing: nothing leaves the sandbox.
    with socket.socket() as taken, socket.socket() as outside:
        for sock in (taken, outside):
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        outside.setblocking(False)
        port, other = taken.getsockname()[1], outside.getsockname()[1]
        prologue = f'''
import shutil
import socket
if IN_TESTS:
    _listener = socket.socket()
    _listener.bind(("127.0.0.1", {port}))
    _listener.listen()
    try:
        socket.create_connection(("127.0.0.1", {other}), timeout=1).sendall(b"out")
    except OSError:
        pass
'''
        files = []
        for index in range(2):
            folder = tmp_path / str(index)
            folder.mkdir()
            files.append(solution(folder, "run-once.py", prologue=prologue))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(check, files))
        with pytest.raises(BlockingIOError):
            outside.accept()
    for report in reports:
        assert report.passed, report.render()
    assert not left_behind()


def test_the_student_check_still_runs_unsandboxed_with_the_guard(tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("keep me")
    path = solution(tmp_path, "run-once.py", prologue=f"import os\nif IN_TESTS:\n    os.remove({str(canary)!r})\n")
    report = checker.check(EXERCISE, path, quick=True)
    assert not report.passed and canary.exists(), report.render()
    assert "outside the check's temporary directory" in report.render()


def test_the_kept_test_ids_are_named_by_what_collecting_reads(tmp_path):
    # A change to a test, the reference code or a built extension names a new
    # file: ids kept from before are never used for other tests.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tinyloop").mkdir()
    test = tmp_path / "tests" / "test_a.py"
    test.write_text("def test_one(): pass\n")
    (tmp_path / "tinyloop" / "m.py").write_text("x = 1\n")
    key = (str(tmp_path), ("-x",), ("tests/test_a.py",))
    names = []
    for change in (None, lambda: test.write_text("def test_two(): pass\n"),
                   lambda: (tmp_path / "tinyloop" / "m.py").write_text("x = 2\n"),
                   lambda: (tmp_path / "tinyloop" / "_m.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")):
        if change is not None:
            change()
        checker._sources_digest.cache_clear()
        names.append(checker._ids_file(tmp_path, key).name)
    checker._sources_digest.cache_clear()
    assert len(set(names)) == 4, names
    assert checker._ids_file(tmp_path, (str(tmp_path), ("-x",), ("tests/b.py",))).name != names[-1]


def test_without_bwrap_available_says_why_and_a_sandboxed_check_refuses(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap on it
    said = subprocess.run([sys.executable, "-c", "from tinyloop.exercises import sandbox; print(sandbox.available())"],
                          env=env, capture_output=True, text=True, timeout=60)
    if sys.platform.startswith("linux"):
        assert said.stdout.strip() == "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    else:
        assert said.stdout.strip().startswith("the sandbox needs Linux namespaces"), said
    done = subprocess.run([sys.executable, "-m", "tinyloop.exercises.grading", EXERCISE.name,
                           str(solution(tmp_path, "run-once.py")), "--sandboxed"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("tinyloop: cannot run the check in a sandbox: "), done


@needs_sandbox
@pytest.mark.slow  # compiles Part IV's extension with the file (a minute on 2 cores)
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the extension")
def test_a_cython_file_builds_in_the_sandbox_and_cannot_include_a_host_file(tmp_path):
    # `cdef extern from "FILE"` makes the C compiler #include FILE and print
    # its lines in its errors: built outside the sandbox, a .pyx could read
    # any file the grader can and show it in its report.  For credit the
    # build runs in the sandbox, which does not see the host's /tmp.
    from tinyloop import stages
    from tinyloop.exercises import build
    if (why := stages.get("uv").unavailable()):
        pytest.skip(why)
    secret = tmp_path / "secret.h"
    secret.write_text("THE-GRADERS-SECRET is on this line\n")
    exercise = catalog.get("uv-write-batch")
    student = tmp_path / "tcp.pyx"
    student.write_text(markers.reference(exercise) + f'\ncdef extern from "{secret}":\n'
                       "    int tinyloop_probe_of_a_host_file\n")
    made = build.build(exercise, student, checker.repository_root(), sandboxed=True)
    assert made.module is None
    said = "\n".join(made.errors)
    assert "THE-GRADERS-SECRET" not in said
    assert "secret.h" in said and ("No such file" in said or "not found" in said), said


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root grader runs the check as another user")
def test_a_checkout_the_checks_user_cannot_enter_is_refused_in_one_line(tmp_path, monkeypatch):
    # A clone into mktemp -d's folder is mode 0700: the grader's own, and the
    # check's user (not root) cannot import tinyloop from it.
    checkout = tmp_path / "checkout"
    (checkout / "tinyloop").mkdir(parents=True)
    (checkout / "tinyloop" / "__init__.py").write_text("")
    bound = sandbox.read_only_paths()
    monkeypatch.setattr(sandbox, "read_only_paths", lambda: (*bound, str(checkout)))
    assert sandbox._enterable(str(checkout)) is None
    os.chmod(checkout, 0o700)
    try:
        why = sandbox._enterable(str(checkout))
        assert why is not None and why.startswith("the check's own user cannot read the checkout "), why
        assert why.endswith("(mktemp -d makes mode 0700; chmod 755 it)")
    finally:
        os.chmod(checkout, 0o755)
