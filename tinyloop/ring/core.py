"""tinyloop.ring's two cores, and which one a loop runs on.

The proactor (tinyloop/ring/proactor.py) drives a ring.  It has two:

    python   tinyloop.raw.uring.Ring: io_uring from its system calls, by
             ctypes, mmap and struct; the chapter's lesson, and what runs
             wherever the extension is not built
    cython   tinyloop.ring._uring.Ring (tinyloop/ring/_uring.pyx): the same
             ring through liburing, the completion loop in C, and a
             request's path in C (tinyloop/ring/fast.pyx)

:class:`CythonProactor` is the Proactor with the second: its ring type,
its way of finding a bytes object's address, and fast.pyx's ProactorCore
in front of it (recv, send, accept, cancel and select in C).  On this
core the loop also runs fast.pyx's iteration, and its transports run
StreamCore's methods (tinyloop/ring/loop.py).  Every other line of the
proactor, the loop and the transports is the same on both, on the same
fields, so the conformance suite holds both to one contract.

Rules this module keeps:
  * The Cython core is used when it is built and importable; the
    environment variable ``TINYLOOP_RING_CORE`` (``python`` or ``cython``)
    or the loop's ``core`` argument forces one.  Asking for ``cython``
    where it is not built raises RuntimeError saying why; an unknown name
    raises ValueError.
  * Importing this module never fails for want of the extension.
"""

from __future__ import annotations

import os

from tinyloop.ring.proactor import Proactor

__all__ = ["CORES", "ENVIRONMENT", "CythonProactor", "built", "proactor_type"]

CORES = ("cython", "python")
ENVIRONMENT = "TINYLOOP_RING_CORE"

try:
    from tinyloop.ring import _uring
except ImportError as exc:  # not built: no liburing headers or no C compiler at install time
    _uring = None
    _MISSING = (f"tinyloop.ring's Cython core is not built in this installation ({exc}); install "
                "liburing's headers and a C compiler (Debian/Ubuntu: apt-get install liburing-dev gcc; "
                "Fedora: dnf install liburing-devel gcc), then reinstall tinyloop (pip install -e .)")


def built() -> bool:
    """True when the Cython core (tinyloop.ring._uring) imports."""
    return _uring is not None


if _uring is not None:
    class CythonProactor(_uring.ProactorCore, Proactor):
        """The Proactor on liburing, with its hot methods in C.

        ``ProactorCore`` (tinyloop/ring/fast.pyx) comes first: ``recv``,
        ``send``, ``accept``, ``cancel`` and ``select`` are C, and ``select``
        runs the completion loop of :meth:`tinyloop.ring._uring.Ring.complete`.
        Everything else (the polls, the timer, connect, close, the observing)
        is the Python Proactor's, on the same fields.
        """

        ring_type = _uring.Ring
        bytes_address = staticmethod(_uring.bytes_address)
        buffer_type = _uring.ProvidedBuffers

        def __init__(self, entries: int = 256) -> None:
            super().__init__(entries)
            self._ids = _uring.Counter(1)  # the same sequence, advanced from C without a call
            self._operations = _uring.Operations()  # the same table, with slots for transports
else:
    CythonProactor = None  # type: ignore[assignment,misc]


def proactor_type(core: str | None = None) -> tuple[str, type[Proactor]]:
    """``(name, class)`` of the proactor a loop runs on.

    ``core`` is ``"cython"``, ``"python"``, or None: then
    ``$TINYLOOP_RING_CORE`` if set, else ``"cython"`` where it is built and
    ``"python"`` elsewhere.  Raises ValueError for another name, and
    RuntimeError when ``"cython"`` is asked for and not built.
    """
    if core is None:
        core = os.environ.get(ENVIRONMENT) or ("cython" if _uring is not None else "python")
    if core == "python":
        return core, Proactor
    if core == "cython":
        if CythonProactor is None:
            raise RuntimeError(_MISSING)
        return core, CythonProactor
    raise ValueError(f"tinyloop.ring's core is one of {', '.join(CORES)}, not {core!r} "
                     f"(the core argument, or ${ENVIRONMENT})")
