# tinyloop/uv/handles.pyx  (included by _loop.pyx)
#
# Handle and TimerHandle in C: a callback, its arguments and its context,
# stored inside the handle object itself.
#
# Rules this file keeps:
#   * The Python face is Part III's (tinyloop/aio/events.py): cancel(),
#     cancelled(), get_context(), when(), and a _run() that reports an
#     exception through loop.call_exception_handler and lets only
#     KeyboardInterrupt and SystemExit through.
#   * The loop calls _run_c, a C method: no attribute lookup, no bound
#     method object, no argument tuple built for the call itself.
#
# Discussion: the pure-Python Handle of Part III costs three things per
# call_soon that this one does not: __init__'s argument parsing, five
# attribute stores through __slots__ descriptors, and, when it runs, a
# lookup of ``_run`` on the instance.  Here the loop fills the fields of a
# new object directly (Handle.__new__ with no __init__) and calls
# ``_run_c`` by a pointer.  zuvloop's README calls this "storing a handle's
# arguments inside the handle"; uvloop's Handle does the same.

cdef extern from "Python.h":
    # The C side of contextvars (PEP 567): what Context.run does, without
    # the method call and the argument tuple it builds.
    object PyContext_CopyCurrent()
    int PyContext_Enter(object context) except -1
    int PyContext_Exit(object context) except -1

cdef object _Future = asyncio.Future
cdef object _extract_stack = asyncio.format_helpers.extract_stack
cdef object _getframe = sys._getframe


cdef inline object _source_stack():
    # Debug mode: the stack that made a handle, innermost last, ending at
    # the Python code that called the loop (asyncio's _source_traceback).
    # Our own methods are C and have no frame: the innermost Python frame
    # is our caller's, where asyncio trims its own two frames to get there.
    return _extract_stack(_getframe(0))


cdef Handle _new_handle(object callback, object args, UVLoop loop, object context):
    cdef Handle handle = Handle.__new__(Handle)
    handle._callback = callback
    handle._args = args
    handle._loop = loop
    handle._context = PyContext_CopyCurrent() if context is None else context
    if loop._debug:
        handle._source_traceback = _source_stack()
    return handle


def _format_callback(callback, args):
    """``name(arg, ...)`` for a log line; a task's step is named by its task."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, _Future):
        return repr(owner)
    name = getattr(callback, "__qualname__", None) or repr(callback)
    return f"{name}({', '.join(repr(arg) for arg in args or ())})"


@cython.freelist(256)
cdef class Handle:
    """A callback waiting in the ready queue or on a descriptor, run in a context.

    Made by the loop (``call_soon``, ``call_soon_threadsafe``,
    ``add_reader``, ``add_writer``), never by user code.  Compare
    ``asyncio.Handle`` (https://docs.python.org/3/library/asyncio-eventloop.html#callback-handles).
    """

    def cancel(self):
        """Stop the callback from running, if it has not run; idempotent.

        The references to the callback and its arguments are dropped at once,
        so a cancelled handle keeps nothing alive.
        """
        if not self._cancelled:
            self._cancelled = True
            self._callback = None
            self._args = None

    def cancelled(self):
        """True once :meth:`cancel` was called."""
        return self._cancelled

    def get_context(self):
        """The :class:`contextvars.Context` the callback runs in."""
        return self._context

    def _run(self):
        """Run the callback now (Part III's name for it); see _run_c."""
        self._run_c()

    cdef int _run_c(self) except -1:
        # Return 0, or raise KeyboardInterrupt/SystemExit (-1): everything
        # else goes to the loop's exception handler, as asyncio's Handle does.
        cdef object context = self._context
        PyContext_Enter(context)
        try:
            if self._args:
                self._callback(*self._args)
            else:
                self._callback()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(exc)
        finally:
            PyContext_Exit(context)
        return 0

    cdef _report(self, BaseException exc):
        context = {
            "message": f"Exception in callback {_format_callback(self._callback, self._args)}",
            "exception": exc,
            "handle": self,
        }
        if self._source_traceback:
            context["source_traceback"] = self._source_traceback
        self._loop.call_exception_handler(context)

    def __repr__(self):
        if self._cancelled:
            return f"<{type(self).__name__} cancelled>"
        owner = getattr(self._callback, "__self__", None)
        if isinstance(owner, _Future):
            # A task's step stands for its task, as in asyncio's log lines
            # ("Executing <Task pending ...> took 0.2 seconds").
            return repr(owner)
        return f"<{type(self).__name__} {_format_callback(self._callback, self._args)}>"


cdef class TimerHandle(Handle):
    """A handle in the timer heap, due at :meth:`when` seconds on ``loop.time()``.

    Compare ``asyncio.TimerHandle``.
    """

    def when(self):
        """The deadline, in seconds on the loop's clock."""
        return self._when

    def cancel(self):
        """Cancel as Handle.cancel; the heap drops the entry lazily (see timers.pyx)."""
        if not self._cancelled:
            Handle.cancel(self)
            if self._in_heap:
                self._loop._timer_cancelled(self)

    def __repr__(self):
        if self._cancelled:
            return f"<TimerHandle cancelled when={self._when:.6f}>"
        return f"<TimerHandle when={self._when:.6f} {_format_callback(self._callback, self._args)}>"
