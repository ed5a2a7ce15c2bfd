"""Keep a student's code from deleting or overwriting files outside the check.

The checker runs a student's file in its test process and in every server
the tests start.  In each of those processes (tinyloop/exercises/startup/
sitecustomize.py installs it at start-up, from the environment the checker
sets) an audit hook (PEP 578, sys.addaudithook) refuses, with a
PermissionError that names the path:

  * removing a file or a directory: os.remove, os.unlink, os.rmdir,
    shutil.rmtree (and so shutil.move's clean-up);
  * renaming onto or away from a path: os.rename, os.replace;
  * truncating a file that exists: open(..., "w"), os.open(..., O_TRUNC),
    os.truncate;

outside the check's temporary directory (TMPDIR points there, so tempfile
and pytest's tmp_path are inside it), unless this process created the path
during the check (a test's own mkdtemp() under /tmp, a UNIX socket it
bound).  Each refusal is also appended to a log the checker reads, so a
student's code that catches the PermissionError still fails the check.

What it cannot see: calls that do not go through Python's os module (the C
of a Cython exercise calling unlink(2), ctypes, a program the code execs).
It is a guard against mistakes, not a sandbox: ``grade`` runs each check in
one (tinyloop/exercises/sandbox.py), where this guard is not installed.

Rules this module keeps:
  * Standard library only, and cheap: the hook sees every audit event of
    the process (every import), so it returns at once for the others.
  * Nothing here opens a descriptor except to log a refusal: a test may
    run the process out of descriptors on purpose.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import sys

__all__ = ["ENV", "LOG_ENV", "install", "install_from_environment", "refused"]

ENV = "TINYLOOP_GUARD"        # the check's temporary directory (os.pathsep: several)
LOG_ENV = "TINYLOOP_GUARD_LOG"  # where each refusal is appended, one line each

_OPEN_WRITE = os.O_WRONLY | os.O_RDWR
# Bound now, at start-up: the conformance suite runs under blockbuster, which
# replaces these in the os module and fails a test that calls them inside
# the loop, where a guarded unlink (a UNIX server's close) may come from.
_getcwd, _lstat, _stat, _readlink = os.getcwd, os.lstat, os.stat, os.readlink
_open, _write, _close = os.open, os.write, os.close
_roots: tuple[str, ...] = ()
_created: set[str] = set()  # paths this process made during the check (absolute, resolved)
_log = ""
_busy = False  # inside the hook: the log's own open must not be judged


def install(roots: list[str], log: str = "") -> None:
    """Refuse, in this process from now on, to delete, rename or truncate a path
    outside ``roots`` (directories) or what the process creates itself.

    ``log``: a file to which each refusal is appended as ``VERB<TAB>PATH``.
    An audit hook cannot be removed (PEP 578): call once per process."""
    global _roots, _log
    # As given (TMPDIR's spelling, which tempfile's paths keep) and resolved.
    _roots = tuple({posixpath.normpath(posixpath.join(_getcwd(), root)) for root in roots}
                   | {_resolve(root) for root in roots})
    _log = log
    sys.addaudithook(_hook)


def install_from_environment(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """:func:`install` with the roots and log the checker put in ``environ``
    (:data:`ENV`, :data:`LOG_ENV`); True if it did, False when they are not set."""
    roots = [root for root in environ.get(ENV, "").split(os.pathsep) if root]
    if not roots:
        return False
    install(roots, environ.get(LOG_ENV, ""))
    return True


def refused(log: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The refusals logged in ``log``: ``(verb, path)`` pairs, in order; [] if none."""
    try:
        with open(log, encoding="utf-8", errors="replace") as lines:
            return [tuple(line.rstrip("\n").split("\t", 1)) for line in lines if "\t" in line]
    except FileNotFoundError:
        return []


def _resolve(path: str, dir_fd: int | None = None) -> str:
    """``path`` absolute, its directories' symbolic links resolved, its last part kept
    (removing a link removes the link, not what it points to)."""
    if not path.startswith("/"):  # audit events give -1 for "no dir_fd"
        base = _readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None and dir_fd >= 0 else _getcwd()
        path = posixpath.join(base, path)
    head, tail = posixpath.split(posixpath.normpath(path))
    return posixpath.join(_real(head), tail) if tail else _real(head)


def _real(path: str) -> str:
    """os.path.realpath of an absolute ``path``, with the functions bound above."""
    pending, resolved, links = path.split("/"), "/", 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = posixpath.dirname(resolved)
            continue
        candidate = posixpath.join(resolved, part)
        try:
            is_link = stat.S_ISLNK(_lstat(candidate).st_mode)
        except OSError:  # not there (yet): the rest cannot be links
            return posixpath.normpath(posixpath.join(candidate, *pending))
        if not is_link:
            resolved = candidate
            continue
        links += 1
        if links > 40:  # a loop (ELOOP): keep the path as it was given
            return path
        target = _readlink(candidate)
        if target.startswith("/"):
            resolved = "/"
        pending = target.split("/") + pending
    return resolved


def _exists(path: str) -> bool:
    try:
        _lstat(path)
    except OSError:
        return False
    return True


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(_stat(path).st_mode)
    except OSError:
        return False


def _inside(path: str) -> bool:
    for root in (*_roots, *_created):
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


def _hook(event: str, args: tuple) -> None:
    global _busy
    if _busy:
        return
    if event == "open":
        path, flags = args[0], args[2]
        if isinstance(path, int) or not isinstance(flags, int) or not flags & (os.O_TRUNC | os.O_CREAT):
            return
        verb, paths = "overwrite", [(path, None)]
    elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
        verb, paths = "delete", [(args[0], args[1])]
    elif event == "os.rename":
        verb, paths = "rename", [(args[0], args[2]), (args[1], args[3])]
    elif event == "os.truncate":
        if isinstance(args[0], int):
            return
        verb, paths = "truncate", [(args[0], None)]
    elif event in ("os.mkdir", "socket.bind"):
        _note_created(event, args)
        return
    else:
        return
    _busy = True
    try:
        for path, dir_fd in paths:
            where = _resolve(os.fsdecode(path), dir_fd)
            if event == "open":
                if not _exists(where):
                    if flags & os.O_CREAT and not _inside(where):
                        _created.add(where)
                    continue
                if not (flags & os.O_TRUNC and flags & _OPEN_WRITE) or not _is_file(where):
                    continue
            if not _inside(where):
                _record(verb, where)
                raise PermissionError(errno.EACCES, f"the exercise checker refused to {verb} a path "
                                      "outside the check's temporary directory", where)
    finally:
        _busy = False


def _note_created(event: str, args: tuple) -> None:
    """A directory made, or a UNIX socket bound, where nothing was: the process's own."""
    global _busy
    if event == "os.mkdir":
        path, dir_fd = args[0], args[2]
    else:  # socket.bind: (socket, address); a UNIX socket's address is its path
        path, dir_fd = args[1], None
        if not isinstance(path, (str, bytes)) or not path or path[:1] in ("\0", b"\0"):
            return
    _busy = True
    try:
        where = _resolve(os.fsdecode(path), dir_fd)
        if not _exists(where) and not _inside(where):
            _created.add(where)
    finally:
        _busy = False


def _record(verb: str, path: str) -> None:
    if not _log:
        return
    try:
        fd = _open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:  # out of descriptors: the PermissionError still says it
        return
    try:
        _write(fd, f"{verb}\t{path}\n".encode("utf-8", "surrogateescape"))
    finally:
        _close(fd)
