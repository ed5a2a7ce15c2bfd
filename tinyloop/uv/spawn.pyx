# tinyloop/uv/spawn.pyx  (included by _loop.pyx)
#
# Subprocesses started by libuv: uv_spawn(3) in place of subprocess.Popen,
# and libuv's SIGCHLD handling in place of Part III's child watchers.
#
# Rules this file keeps:
#   * The transport is Part III's (tinyloop/aio/base_subprocess.py): the
#     order of the protocol's calls, the pipes, close() and _wait() are
#     inherited; only the two methods a subclass supplies change, _start
#     (uv_spawn) and _send_signal (uv_process_kill).
#   * No Python code runs between fork and exec, and none waits in the
#     loop's thread for the exec: uv_spawn forks, the child calls exec, and
#     libuv reads its own close-on-exec error pipe in C, with the GIL
#     released, so other threads run meanwhile.  Part III (and asyncio)
#     run subprocess.Popen there, whose _execute_child reads that pipe with
#     os.read in Python.
#   * What uv_spawn cannot do (preexec_fn, user, group, umask, ...:
#     Python code or system calls between fork and exec) goes to Part
#     III's Popen path, unchanged: UVLoop._make_subprocess decides.
#   * A UVProcess owns its uv_process_t until the exit (or the loop's
#     close): it holds a reference to itself for that long, because libuv
#     holds only a pointer to it.
#
# Discussion: how the two learn of an exit.  libuv installs one SIGCHLD
# handler for the process; in its loop's thread it calls waitpid(2) with
# WNOHANG for each child it started, and runs the exit callback of each
# that has exited, in the poll phase.  Part III opens a pidfd per child
# (pidfd_open(2)) and polls it like a socket.  Both reap only their own
# children; neither leaves a window in which a recycled pid could be
# signalled: libuv reaps and reports in the same callback, in the loop's
# thread, and send_signal after that raises ProcessLookupError.

from libc.stdint cimport int64_t

import subprocess as _subprocess

from tinyloop.aio.base_subprocess import BaseSubprocessTransport as _BaseSubprocessTransport

# Popen's keyword arguments that uv_spawn expresses; any other one (and
# restore_signals=False: libuv resets every signal in the child) sends the
# call to Part III's Popen transport.
SPAWN_KEYWORDS = frozenset({"cwd", "env", "pass_fds", "start_new_session", "close_fds",
                            "restore_signals", "executable"})


cdef void _on_process_exit(uv.uv_process_t* handle, int64_t exit_status,
                           int term_signal) noexcept with gil:
    # libuv has reaped the child (waitpid(2)): report the exit code as
    # Popen's returncode, minus the signal's number if one killed it.
    if handle.data is NULL:
        return
    (<UVProcess>handle.data)._exited(-term_signal if term_signal else exit_status)


cdef char** _c_strings(list items) except NULL:
    # A NULL-terminated array of the bytes objects' buffers, borrowed:
    # ``items`` must outlive the array (one uv_spawn call).
    cdef char** array = <char**>PyMem_RawMalloc((len(items) + 1) * sizeof(char*))
    cdef Py_ssize_t i
    if array is NULL:
        raise MemoryError()
    for i in range(len(items)):
        array[i] = <char*>(<bytes>items[i])
    array[len(items)] = NULL
    return array


cdef bytes _c_string(object value, str what):
    # A str, bytes or path as the file system's bytes, checked for what C
    # would silently cut short (Popen raises the same ValueError).
    cdef bytes encoded = os.fsencode(value)
    if b"\0" in encoded:
        raise ValueError(f"embedded null byte in {what}")
    return encoded


cdef class UVProcess:
    """A child started by uv_spawn, until libuv reports its exit.

    Made by :func:`spawn`.  ``pid`` is the child's; ``returncode`` None
    until the exit callback has run, then the exit status or minus the
    signal number.
    """
    cdef uv.uv_process_t* handle
    cdef UVLoop loop
    cdef readonly int pid
    cdef readonly object returncode
    cdef object on_exit

    cdef _exited(self, object returncode):
        keep = self   # _release drops libuv's reference: not the last while this runs
        self.returncode = returncode
        on_exit, self.on_exit = self.on_exit, None
        self._release()
        try:
            if on_exit is not None:
                on_exit(returncode)
        except BaseException as exc:
            self.loop._stash_error(exc)   # the transport reports its own errors; this is a bug
        # What on_exit queued runs in this iteration's idle phase: the check
        # handle arms it only after I/O callbacks it counted, not after this.
        if self.loop._ready:
            self.loop._arm_idle()

    cdef _release(self):
        # Give the handle back to libuv and drop the reference libuv held.
        if self.handle is NULL:
            return
        _close_handle(<uv.uv_handle_t*>self.handle)
        self.handle = NULL
        Py_DECREF(self)

    def _abandon(self):
        """The loop is closing with the child still running: let the handle go.

        The child is not reaped (it stays a zombie until this process
        exits, as with Part III's loop closed before its pidfd turned
        readable); :meth:`kill` still reaches it by pid, which is still its.
        """
        keep = self   # as in _exited
        self.on_exit = None
        self._release()

    def kill(self, int signum):
        """Send ``signum`` to the child (uv_process_kill, kill(2)).

        Raises ProcessLookupError once libuv has reaped it: the pid may
        already be someone else's.
        """
        cdef int err
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        if self.handle is NULL:   # abandoned: unreaped, so the pid is still the child's
            os.kill(self.pid, signum)
            return
        err = uv.uv_process_kill(self.handle, signum)
        if err < 0:
            raise _uv_error(err)


def spawn(UVLoop loop, file, list args, env, cwd, list stdio, bint new_session, on_exit):
    """Start a child with uv_spawn; returns its :class:`UVProcess`.

    ``file`` is the program (searched in ``env``'s PATH, as execvp(3)
    does), ``args`` its argv (str, bytes or paths), ``env`` a mapping or
    None (ours), ``cwd`` a path or None.  ``stdio[i]`` is the descriptor
    the child gets as ``i``, or -1 for none (0-2: /dev/null; above 2:
    closed at exec).  ``new_session``: setsid(2) in the child.
    ``on_exit(returncode)`` runs in the loop's thread once libuv has reaped
    the child.  Raises OSError as exec(3) or chdir(2) failed in the child
    (FileNotFoundError for a missing program), ValueError for a null byte,
    RuntimeError on a closed loop.
    """
    cdef uv.uv_process_options_t options
    cdef uv.uv_stdio_container_t* containers = NULL
    cdef char** c_args = NULL
    cdef char** c_env = NULL
    cdef bytes c_file = _c_string(file, "the program")
    cdef bytes c_cwd = None
    cdef list argv = [_c_string(arg, "an argument") for arg in args]
    cdef list environment = None
    cdef UVProcess process
    cdef int err
    cdef Py_ssize_t i
    if loop._closed:
        loop._check_closed()
    if env is not None:
        environment = []
        for name, value in env.items():
            name, value = _c_string(name, "an environment name"), _c_string(value, "an environment value")
            if b"=" in name:
                raise ValueError("illegal environment variable name")
            environment.append(name + b"=" + value)
    if cwd is not None:
        c_cwd = _c_string(cwd, "cwd")
    memset(&options, 0, sizeof(options))
    process = UVProcess.__new__(UVProcess)
    process.loop = loop
    try:
        c_args = _c_strings(argv)
        if environment is not None:
            c_env = _c_strings(environment)
        containers = <uv.uv_stdio_container_t*>PyMem_RawMalloc(
            len(stdio) * sizeof(uv.uv_stdio_container_t))
        if containers is NULL:
            raise MemoryError()
        for i in range(len(stdio)):
            if stdio[i] < 0:
                containers[i].flags = uv.UV_IGNORE
            else:
                containers[i].flags = uv.UV_INHERIT_FD
                containers[i].data.fd = stdio[i]
        options.exit_cb = _on_process_exit
        options.file = <char*>c_file
        options.args = c_args
        options.env = c_env
        options.cwd = <char*>c_cwd if c_cwd is not None else NULL
        options.flags = uv.UV_PROCESS_DETACHED if new_session else 0
        options.stdio_count = <int>len(stdio)
        options.stdio = containers
        process.handle = <uv.uv_process_t*>loop._alloc_handle(sizeof(uv.uv_process_t))
        # Released: the fork and the wait for exec (libuv's error pipe) let
        # other threads run.  libuv's state is this thread's alone.
        with nogil:
            err = uv.uv_spawn(loop.uvloop, process.handle, &options)
        if err < 0:
            # Even a failed spawn leaves an initialised handle to close (process.html).
            _close_handle(<uv.uv_handle_t*>process.handle)
            process.handle = NULL
            # As Popen reports a failed exec: the errno's own text, and the program.
            raise OSError(-err, os.strerror(-err), os.fsdecode(c_file))
    finally:
        PyMem_RawFree(containers)
        PyMem_RawFree(c_args)
        PyMem_RawFree(c_env)
    process.pid = process.handle.pid
    process.on_exit = on_exit
    process.handle.data = <void*>process
    Py_INCREF(process)   # libuv holds a pointer to it until the exit
    return process


class _Child:
    """What Part III's transport reads of a Popen, for a child uv_spawn started.

    ``pid``, ``args``, ``returncode`` (set by the transport at the exit)
    and the parent's ends of the pipes as unbuffered file objects
    (``stdin``, ``stdout``, ``stderr``, None where there is no pipe): the
    transport's ``get_extra_info("subprocess")``.
    """

    def __init__(self, pid, args, stdin, stdout, stderr):
        self.pid = pid
        self.args = args
        self.returncode = None
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr

    def __repr__(self):
        return f"<{type(self).__name__} pid={self.pid} returncode={self.returncode}>"


class UVSubprocessTransport(_BaseSubprocessTransport):
    """Part III's subprocess transport with the child started by uv_spawn (process.html).

    Same arguments as :class:`tinyloop.aio.base_subprocess.BaseSubprocessTransport`;
    ``kwargs`` may hold only :data:`SPAWN_KEYWORDS` (UVLoop._make_subprocess
    sends any other to Part III).  ``close_fds=True`` (Popen's default):
    every descriptor that is not inheritable (PEP 446: all those Python
    opens) closes at exec; one made inheritable on purpose and not in
    ``pass_fds`` stays open in the child, as with ``close_fds=False``.
    """

    def _start(self, args, shell, stdin, stdout, stderr, bufsize, **kwargs):
        executable = kwargs.get("executable")
        if shell:
            args = ["/bin/sh", "-c", args]
            if executable is not None:
                args[0] = executable
        elif isinstance(args, (str, bytes, os.PathLike)):
            args = [args]
        else:
            args = list(args)
        if not args:
            raise IndexError("list index out of range")   # Popen's, for an empty args
        pass_fds = sorted(set(kwargs.get("pass_fds", ())))
        child_ends = []     # ours to close once the child has them (or the spawn failed)
        parent_ends = [None, None, None]
        try:
            stdio = [self._child_end(fd, choice, stdout, child_ends, parent_ends)
                     for fd, choice in enumerate((stdin, stdout, stderr))]
            if stderr == _subprocess.STDOUT:
                stdio[2] = stdio[1]
            if pass_fds:
                stdio += [-1] * (max(pass_fds) + 1 - len(stdio))
                for fd in pass_fds:
                    stdio[fd] = fd
            self._uvproc = spawn(self._loop, executable or args[0], args, kwargs.get("env"),
                                 kwargs.get("cwd"), stdio, kwargs.get("start_new_session", False),
                                 self._process_exited)
        except BaseException:
            for fd in parent_ends:
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        files = [None if fd is None else open(fd, "wb" if i == 0 else "rb", buffering=0)
                 for i, fd in enumerate(parent_ends)]
        self._proc = _Child(self._uvproc.pid, args, *files)

    @staticmethod
    def _child_end(int fd, choice, stdout, list child_ends, list parent_ends):
        # Popen's meanings of stdin/stdout/stderr (its _get_handles), as the
        # descriptor the child gets as ``fd``.
        if choice is None:
            return fd                      # inherited
        if choice == _subprocess.PIPE:
            read_end, write_end = os.pipe()   # both close-on-exec; libuv dup2()s the child's
            parent_ends[fd], child_end = (write_end, read_end) if fd == 0 else (read_end, write_end)
            child_ends.append(child_end)
            return child_end
        if choice == _subprocess.DEVNULL:
            child_end = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            child_ends.append(child_end)
            return child_end
        if choice == _subprocess.STDOUT:
            if fd != 2:
                raise ValueError("STDOUT can only be used for stderr")
            return -1                      # replaced by stdout's end
        return choice if isinstance(choice, int) else choice.fileno()

    def _send_signal(self, sig):
        self._uvproc.kill(sig)
