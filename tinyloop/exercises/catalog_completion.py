"""The exercises of the completion chapter (Part VI): what a server on
io_uring owes the kernel for a buffer it handed over, and what it does
when an operation that stays armed stops.
"""

from __future__ import annotations

from tinyloop.exercises.model import Exercise

__all__ = ["EXERCISES"]

_LOOP_PROPERTIES = ("single_thread", "idle_cpu", "no_fd_growth", "slow_client")

EXERCISES = [
    Exercise(
        name="uring-send",
        chapter="completion",
        title="Hand the kernel a buffer, and leave it alone until the completion",
        module="tinyloop.raw.uring_server",
        instructions="""
            Write UringServer.flush() and UringServer.on_send().  flush():
            when no send is outstanding (conn.sending is None), the
            connection has not failed and responses wait in conn.outgoing,
            make them one immutable bytes object in conn.sending, set
            conn.sent to 0, empty conn.outgoing, and call
            self.submit_send(conn).  The kernel reads conn.sending until the
            send's completion: never change it before.  on_send(conn, res):
            res < 0 is a failed send (set conn.failed, conn.sending = None);
            otherwise res bytes went: add them to conn.sent, and if some are
            left call submit_send again (it sends from conn.sent on), or else
            set conn.sending to None and flush what waited meanwhile.
        """,
        tests=("tests/test_uring.py", "tests/test_servers.py", "-k", "uring and not multishot"),
        stage="uring",
        properties=_LOOP_PROPERTIES,
    ),
    Exercise(
        name="uring-rearm",
        chapter="completion",
        title="Submit a multishot receive again when it ends, and only then",
        module="tinyloop.raw.uring_multishot_server",
        instructions="""
            Write the start of MultishotServer.on_recv(conn, res, flags).  A
            CQE without CQE_F_MORE in flags means the receive has ended: set
            conn.receiving and conn.cancelling to False (advance() then
            submits it again if the connection still wants to read).  If
            flags has CQE_F_BUFFER, res bytes are in the provided buffer
            buffer_id(flags): copy them out with self.buffers.data(), then
            (not before: the kernel may fill it again at once) give the
            buffer back with self.buffers.recycle(), and pass the bytes to
            self.received(conn, data).  res == 0 without a buffer is end
            of stream: self.received(conn, b"").  Any other negative res
            fails the connection (conn.failed = True), except -ENOBUFS (the
            buffers ran out: just submit again) and -ECANCELED (we asked).
        """,
        tests=("tests/test_uring.py", "tests/test_servers.py", "-k", "multishot"),
        stage="uring-multishot",
        properties=_LOOP_PROPERTIES,
    ),
]
