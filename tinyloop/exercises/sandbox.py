"""The boundary around a check graded for credit: each process that runs a
student's code starts inside a sandbox built by bubblewrap (``bwrap``, the
tool Flatpak uses; see bwrap(1)) from Linux namespaces and resource limits:

  * a mount namespace whose root holds only the system (/usr, /etc), the
    interpreter's prefix, this checkout and the check's own read-only
    folder, all read-only, and a private tmp (a tmpfs of bounded size at
    /tmp, also HOME): nothing outside it can be written, nor read where it
    is not bound (the teacher's home, other students' files), and a
    private /dev/shm for POSIX semaphores;
  * its own network namespace, whose only interface is its own loopback
    (bwrap brings ``lo`` up): parallel checks may listen on the same port,
    and nothing leaves the machine;
  * its own PID namespace, and ``--die-with-parent``: when the check ends
    (or its ``bwrap`` is killed), the kernel kills every process in the
    namespace, ``setsid()`` or not;
  * rlimits (setrlimit(2)) on CPU time, address space, processes and file
    size, set before ``bwrap`` and inherited by all it starts;
  * an unprivileged user: when the grader is root, the code under test runs
    as a uid of its own (setpriv(1), no capabilities, no_new_privs), so the
    process limit counts only its processes; otherwise it runs as the
    grader's own user, which owns nothing the sandbox can reach writably.

What the sandbox does not do is decide anything: the checker
(tinyloop/exercises/checker.py) reads each test's outcome from a pipe it
owns (tinyloop/exercises/outcomes.py) and ends a run at a wall-clock limit
of its own.

Rules this module keeps:
  * Standard library only; ``bwrap`` and ``setpriv`` are the only programs.
  * :func:`available` says in one line why a sandbox cannot be built, so a
    caller can refuse (grade) or fall back to the audit-hook guard (check).
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tinyloop

__all__ = ["FOLDER", "Limits", "LIMITS", "available", "command", "popen", "read_only_paths"]

# Where the check's read-only folder (the student's file, the go file of a
# waiting run) appears inside the sandbox.  A name no checkout lives under:
# CI clones into /check/..., and a shorter name once hid the whole checkout.
FOLDER = "/tinyloop-check"
# What every sandbox has of its own, never bound from the host.  A path
# *inside* one of the first two may be (a checkout cloned under /tmp, as CI
# does): it is bound read-only on top of the private tmp.
_OWN = ("/tmp", "/var/tmp", "/dev", "/proc", "/sys", "/run", FOLDER)
_SCRATCH = ("/tmp", "/var/tmp")
# The uids the code under test runs as when the grader is root: one per
# sandbox, from this range, so RLIMIT_NPROC (counted per real uid) of one
# check is not spent by another running beside it.
_UIDS = range(61000, 61000 + 4000)


@dataclass(frozen=True)
class Limits:
    """Resource limits of every process in one sandbox (rlimits are per process,
    except ``processes``, per uid)."""

    cpu_seconds: int = 600              # RLIMIT_CPU: SIGXCPU, then SIGKILL
    memory_bytes: int = 4 << 30         # RLIMIT_AS: address space of one process
    processes: int = 1024               # RLIMIT_NPROC: processes and threads of the uid
    file_bytes: int = 256 << 20         # RLIMIT_FSIZE: the largest file a process may write
    tmp_bytes: int = 512 << 20          # size of the private tmp (a tmpfs, in memory)
    shm_bytes: int = 64 << 20           # size of the private /dev/shm (a tmpfs)


LIMITS = Limits()


@functools.lru_cache(maxsize=1)
def available() -> str | None:
    """None if a sandbox can be built here, else one line saying why not (no bwrap,
    user namespaces off, not Linux, a checkout or interpreter the sandbox's
    user cannot enter).  Cached: tried once per process, by running ``true``,
    then this interpreter, in sandboxes of the shape :func:`command` builds."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux namespaces, and this is {sys.platform}"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed: the code under test cannot drop root"
    done = _probe(["true"])
    if isinstance(done, str):
        return done
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"bwrap cannot build a sandbox here ({why}); are user namespaces allowed?"
    checkout = os.path.realpath(repository_root())
    if not any(checkout == p or checkout.startswith(p.rstrip("/") + "/") for p in read_only_paths()):
        return (f"the checkout {checkout} lies under a folder every sandbox has of its own "
                f"({', '.join(_OWN)}): move it elsewhere")
    return _enterable(checkout)


def _probe(argv: list[str]) -> subprocess.CompletedProcess[str] | str:
    """``argv`` run to its end in a sandbox of :func:`command`'s shape (30 s at most), or why bwrap could not run."""
    try:
        full, preexec = command(argv)
        return subprocess.run(full, preexec_fn=preexec, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return f"bwrap could not run: {error}"


def _enterable(checkout: str) -> str | None:
    """None if the sandbox's user can start this interpreter and read this checkout, else why not.
    Under a root grader that user is not root: a checkout that only its owner may enter (a clone
    into ``mktemp -d``'s folder, mode 0700) would fail every check with an ImportError.  (The
    folders above a bound path are made anew in the sandbox, 0755: only the bound one's mode counts.)"""
    init = os.path.join(checkout, "tinyloop", "__init__.py")
    done = _probe([sys.executable, "-I", "-c",
                   f"import os, sys; sys.exit(0 if os.access({init!r}, os.R_OK) else 3)"])
    if isinstance(done, str):
        return done
    if done.returncode == 0:
        return None
    who = "the check's own user" if os.geteuid() == 0 else "this user"
    if done.returncode == 3:
        return (f"{who} cannot read the checkout {checkout} in the sandbox: it is not enterable by "
                "others (mktemp -d makes mode 0700; chmod 755 it)")
    return (f"{who} cannot start {sys.executable} in the sandbox (exit {done.returncode}): its "
            "environment's folder is not enterable by others (chmod 755 it)")


@functools.lru_cache(maxsize=1)
def read_only_paths() -> tuple[str, ...]:
    """The host paths bound read-only into every sandbox: the system, the
    interpreter's prefixes and every ``sys.path`` entry (the checkout, the
    virtual environment), with no path inside another."""
    wanted = {"/usr", "/etc", "/opt", sys.prefix, sys.base_prefix, sys.exec_prefix,
              str(Path(sys.executable).resolve().parent.parent)}
    wanted |= {p for p in sys.path if p and os.path.isabs(p)}
    # The folder holding the tinyloop package: the checkout, whose tests/ the check runs.
    wanted.add(repository_root())
    paths = sorted(os.path.realpath(p) for p in wanted if os.path.exists(p))
    # Never the whole machine, nor what the sandbox has of its own (/tmp
    # itself on sys.path, a working directory, would hide the private tmp);
    # a checkout or a virtual environment inside /tmp is bound over it.
    paths = [p for p in paths if p != "/" and p not in _OWN
             and not any(p.startswith(own + "/") for own in _OWN if own not in _SCRATCH)]
    kept: list[str] = []
    for path in paths:  # sorted: a parent comes before what is inside it
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return tuple(kept)


def repository_root() -> str:
    """The checkout: the folder holding the tinyloop package."""
    return str(Path(tinyloop.__file__).resolve().parent.parent)


_uid_lock = threading.Lock()
_uid_next = os.getpid()  # where this process starts in _UIDS: two graders apart


def _uid() -> int:
    """The next uid of :data:`_UIDS`, in turn (thread-safe)."""
    global _uid_next
    with _uid_lock:
        _uid_next += 1
        return _UIDS[_uid_next % len(_UIDS)]


def command(argv: Sequence[str], *, folder: str | os.PathLike[str] | None = None,
            env: Mapping[str, str] | None = None, limits: Limits | None = None,
            cwd: str | None = None, writable: str | os.PathLike[str] | None = None):
    """``(argv, preexec)``: the command that runs ``argv`` in a new sandbox, and the
    function subprocess must call in the child before exec (it sets the rlimits).

    ``folder``: a host directory shown read-only at :data:`FOLDER`.  ``env``:
    the whole environment of ``argv`` (the sandbox starts from an empty one;
    HOME and TMPDIR are the private tmp).  ``cwd``: the working directory
    inside (default: the private tmp).  ``limits``: default :data:`LIMITS`,
    read at each call.  ``writable``: a host directory the sandbox may write,
    bound read-write at its own path (a build's scratch copy); under a root
    grader it is first given to the sandbox's user.  Every file descriptor
    the caller passes (``pass_fds``) stays open in the sandbox.
    """
    limits = limits if limits is not None else LIMITS
    bound = read_only_paths()
    out = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "tinyloop-check",
           "--dev", "/dev", "--proc", "/proc",
           "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
           # POSIX semaphores and shared memory (multiprocessing's locks, queues)
           "--perms", "1777", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm"]
    # /bin, /lib... are symbolic links into /usr on a merged-/usr system.
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        link = f"/{name}"
        if os.path.islink(link):
            out += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            out += ["--ro-bind", link, link]
    made = {"/", "/tmp", "/dev", "/proc"}
    writable = os.path.realpath(writable) if writable is not None else None
    for path in [*bound, *([FOLDER] if folder is not None else []), *([writable] if writable else [])]:
        # bwrap makes missing parents with the host's mode (/root is 0700):
        # make each one world-searchable first.
        parents = [str(p) for p in reversed(Path(path).parents)]
        for parent in parents:
            if parent not in made:
                made.add(parent)
                out += ["--perms", "0755", "--dir", parent]
        made.add(path)
        out += ["--bind" if path == writable else "--ro-bind", str(folder) if path == FOLDER else path, path]
    environment = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **(env or {}),
                   "HOME": "/tmp", "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"}
    out += ["--clearenv"]
    for key, value in environment.items():
        out += ["--setenv", key, value]
    out += ["--chdir", cwd or "/tmp", "--"]
    if os.geteuid() == 0:
        uid = _uid()
        if writable:
            _give(writable, uid)
        out += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    out += list(argv)

    def preexec() -> None:
        # In the child, between fork and exec: inherited by bwrap and all it starts.
        for which, value in ((resource.RLIMIT_CPU, limits.cpu_seconds),
                             (resource.RLIMIT_AS, limits.memory_bytes),
                             (resource.RLIMIT_NPROC, limits.processes),
                             (resource.RLIMIT_FSIZE, limits.file_bytes),
                             (resource.RLIMIT_CORE, 0)):
            _, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))

    return out, preexec


def _give(folder: str, uid: int) -> None:
    """Make ``folder`` and all in it the user ``uid``'s (chown, symbolic links not followed)."""
    for parent, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            os.chown(os.path.join(parent, name), uid, uid, follow_symlinks=False)
    os.chown(folder, uid, uid)


def popen(argv: Sequence[str], *, folder: str | os.PathLike[str] | None = None,
          env: Mapping[str, str] | None = None, limits: Limits | None = None, cwd: str | None = None,
          pass_fds: Sequence[int] = (), stdout=None, stderr=None) -> subprocess.Popen:
    """Start ``argv`` in a new sandbox (:func:`command`); standard input is /dev/null.

    The returned process is ``bwrap``'s: killing it (SIGKILL) ends the sandbox and
    every process in it.  It runs in a session of its own."""
    full, preexec = command(argv, folder=folder, env=env, limits=limits, cwd=cwd)
    return subprocess.Popen(full, preexec_fn=preexec, pass_fds=tuple(pass_fds),
                            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                            start_new_session=True)
