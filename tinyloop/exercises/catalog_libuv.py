"""The exercises of the libuv chapter (Part IV), written in Cython: the timer
heap behind one uv_timer_t, the ready queue run from an idle handle, and
a turn's writes sent in one writev.  The student's file is a .pyx file;
the checker builds tinyloop.uv._loop with it (tinyloop/exercises/build.py)
and runs, on that build, the exercise's own tests
(tests/test_exercise_libuv.py), then the conformance suite's uv row and
the HTTP suite on both uv stages.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

# "[uv]" and not "uv": the brackets are pytest's parameter ids, and plain
# "uv" would select uvloop's rows as well.
_UV_TESTS = ("tests/conformance", "tests/test_servers.py", "-k", "[uv] or [uv-streams]")

EXERCISES = [
    Exercise(
        name="uv-timer-heap",
        chapter="libuv",
        title="The timer heap in C, behind one uv_timer_t",
        module="tinyloop.uv._loop",
        extension="tinyloop.uv._loop",
        instructions="""
            Two regions in UVLoop (the heap itself, _push_timer, _pop_top,
            _sift_up and _sift_down are written).  In _arm_timer(), point the
            one uv_timer_t (self._timer) at the earliest live deadline:
            first pop every cancelled timer off the top of the heap
            (_pop_top(self), and count it out of self._timers_cancelled);
            with the heap empty, uv_timer_stop it and set self._armed_when
            to -1.0; if the top's deadline is already armed, do nothing;
            otherwise call uv_update_time (libuv's "now" is cached per
            iteration), compute the delay in whole milliseconds, rounded up
            (0 when it is past), uv_timer_start(self._timer, _on_timer, ms,
            0), and remember the deadline in self._armed_when.  In
            _fire_timers(), which _on_timer calls: forget the armed deadline,
            move every timer whose deadline is at or before self.time() to
            the ready queue in deadline order (a cancelled one is dropped
            and counted out), re-arm for the next one, and arm the idle
            handle (self._arm_idle()) if anything is ready.  libuv counts in
            milliseconds and may wake you a little early: then nothing is
            due, and re-arming must still work.
        """,
        tests=_UV_TESTS,
        stage="uv",
        properties=("single_thread", "idle_cpu", "no_fd_growth"),
    ),
    Exercise(
        name="uv-ready-queue",
        chapter="libuv",
        title="The ready queue, run from libuv's idle phase",
        module="tinyloop.uv._loop",
        extension="tinyloop.uv._loop",
        instructions="""
            Write UVLoop._run_ready(), which the idle handle's callback calls
            once per iteration of uv_run.  Run exactly the handles that are
            in self._ready when it starts, in order (popleft): what they
            schedule waits for the next iteration, so that timers and I/O
            get their turn.  Skip a cancelled handle.  A Handle or
            TimerHandle of ours runs through its C method handle._run_c(),
            or through self._run_handle(handle) in debug mode (it times the
            callback and logs a slow one); any other item is a Part III
            handle (signal handlers queue them): run it with
            self._run_handle(item) unless it is cancelled.  At the end, if
            self._stopping, call uv_stop(self.uvloop); otherwise, when the
            queue is empty, stop the idle handle (uv_idle_stop(self._idle),
            self._idle_active = False): while it is active libuv never
            blocks, and the loop would spin.
        """,
        tests=_UV_TESTS,
        stage="uv",
        properties=("single_thread", "idle_cpu", "no_fd_growth", "slow_client"),
    ),
    Exercise(
        name="uv-write-batch",
        chapter="libuv",
        title="Batch a turn's writes: one writev per transport",
        module="tinyloop.uv.tcp",
        extension="tinyloop.uv._loop",
        instructions="""
            Two regions in TCPTransport (tcp.pyx).  In write(data), after
            the checks: append the bytes to self._pending, add their length
            to self._pending_size; if that is now above the high-water mark
            (self._high_water), send at once with self._flush(); otherwise
            put the transport on the loop's flush list
            (self._loop._to_flush), once per turn (self._queued says whether
            it is there).  Then call self._check_pause().  Below the
            mark, send nothing here.  In _flush(), which the loop calls at the end
            of the turn: take the pending list (more than IOV_MAX_BATCH
            buffers are joined into one), fill a uv_buf_t per buffer, and
            hand them all to one uv_try_write.  If the kernel took
            everything, call self._on_written(0).  UV_EAGAIN means it took
            nothing; another negative result goes to self._fatal_error(...,
            "Fatal write error on socket transport").  Otherwise skip the
            bytes that went out and give the rest to uv_write in a
            _WriteRequest, which must keep the bytes objects alive (libuv
            holds pointers into them) and hold a reference for libuv until
            _on_write.
        """,
        tests=_UV_TESTS,
        stage="uv",
        properties=("single_thread", "idle_cpu", "no_fd_growth", "slow_client"),
    ),
]
