"""The exercises of the baselines chapter (Part 0): the blocking server's
limits, and the thread per connection that lifts them.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

EXERCISES = [
    Exercise(
        name="thread-per-connection",
        chapter="baselines",
        title="Give every connection its own thread",
        module="tinyloop.baseline.threaded",
        instructions="""
            The accept loop in serve() has just accepted a connection `sock`.
            Hand it to a new daemon thread that serves it and then closes it
            (_serve_and_close does both), and go straight back to accept() so
            the next client is not kept waiting.  If the thread cannot be
            started (RuntimeError), close the socket and log it, so the server
            survives.
        """,
        tests=("tests/test_servers.py", "-k", "threaded"),
        stage="threaded",
        properties=("no_fd_growth", "slow_client"),
    ),
]
