# tests/test_stop_on_sigterm.py
#
# tinyloop.serving.stop_on_sigterm: a SIGTERM stops a server blocked in a
# system call even when the signal does not interrupt that call.  The race it
# closes (the signal lands just before the main thread enters accept(2) or
# epoll_wait(2)) is a preemption a few instructions wide, too rare to test by
# timing.  These tests make the same state for certain: the signal is taken
# by another thread, so its C-level handler runs and the main thread's
# accept() goes on waiting, exactly as after the race.  Each case runs in a
# child process of its own (signal handlers are per process).

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

TIMEOUT = 10.0  # seconds for each child; a stop that works takes well under one

# The child blocks in accept() on a listener no client connects to.  A
# thread that has not blocked SIGTERM raises it on itself: Python's handler
# is now due in the main thread, which is asleep in accept().
CHILD = textwrap.dedent("""
    import signal, sys, threading, time
    from tinyloop.serving import listen, stop_on_sigterm

    stop_on_sigterm()
    listener = listen(port=0)

    def elsewhere():
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=elsewhere, daemon=True).start()
    try:
        listener.accept()
    except KeyboardInterrupt as stop:
        print("stopped:", stop, flush=True)
        {cleanup}
        print("cleaned up", flush=True)
        sys.exit(0)
    """)


def run_child(cleanup: str = "pass") -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", CHILD.format(cleanup=cleanup)],
                            capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return result, time.monotonic() - started


def test_a_sigterm_that_does_not_interrupt_the_wait_still_stops_the_server() -> None:
    result, elapsed = run_child()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stopped: signal 15", "cleaned up"]
    assert elapsed < 5.0


def test_a_second_sigterm_does_not_break_the_clean_up() -> None:
    # The nudges, and a user's impatient second SIGTERM, arrive while the
    # finally blocks close sockets: they must not raise there again.
    cleanup = "import os; os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.3)"
    result, _ = run_child(cleanup)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stopped: signal 15", "cleaned up"]


def test_the_nudging_thread_takes_no_stop_signal_itself() -> None:
    # A process-directed signal goes to any thread that does not block it;
    # the nudger must leave SIGTERM and SIGINT to the main thread.
    code = textwrap.dedent("""
        import signal, threading
        from tinyloop.serving import stop_on_sigterm
        stop_on_sigterm()
        nudger, = [t for t in threading.enumerate() if t.name == "tinyloop-signal"]
        with open(f"/proc/self/task/{nudger.native_id}/status") as status:
            blocked = int(next(l for l in status if l.startswith("SigBlk:")).split()[1], 16)
        print(all(blocked & (1 << (s - 1)) for s in (signal.SIGTERM, signal.SIGINT)))
        print(signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]  # the nudger blocks them; main does not


def test_a_server_counts_one_thread_though_the_nudger_runs_beside_it() -> None:
    # The exercises' single_thread property counts a server's threads; the
    # nudger is the command line's, not the student's.
    from tinyloop.testing import ServerProcess
    with ServerProcess("epoll") as server:
        assert len(os.listdir(f"/proc/{server.pid}/task")) == 2
        assert server.thread_count() == 1


def test_naming_threads_after_the_nudger_hides_only_one() -> None:
    from tinyloop.testing import ServerProcess
    fake = textwrap.dedent("""
        import threading, time
        from tinyloop.serving import NUDGER_NAME, announce, listen

        def disguised(ready):
            with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
                comm.write(NUDGER_NAME)
            ready.release()
            time.sleep(60)

        ready = threading.Semaphore(0)
        for _ in range(2):
            threading.Thread(target=disguised, args=(ready,), daemon=True).start()
        ready.acquire(); ready.acquire()
        listener = listen(port=0)
        announce("disguised", listener)
        time.sleep(60)
        """)
    with ServerProcess("disguised", command=[sys.executable, "-c", fake]) as server:
        assert server.thread_count() == 2  # main and one of the two: only one is left out
