# benchmarks/realworld/services.py
#
# The real services Part V's experiments run beside the Python servers:
# PostgreSQL and nginx, from the system's packages, each started by a
# context manager and gone when it exits.
#
#   with postgres(rows=1000) as pg:        # initdb, start, create bench.items
#       ... asyncpg.create_pool(pg.dsn) ...
#   with nginx([app_port]) as proxy:       # generated nginx.conf, one upstream
#       ... wrk http://127.0.0.1:{proxy.port}/ ...
#
# Rules this file keeps:
#   * Nothing is mocked.  The binaries come from PATH or the places the
#     system's packages put them; when one is missing, ServiceMissing says
#     what to install, and a caller turns that into a skipped row.
#   * Everything a service writes lives in one tempfile.mkdtemp directory:
#     data, sockets, pid file, logs, configuration.  The directory and every
#     process of the service are gone when the ``with`` block exits, however
#     it exits (``finally``), and every wait is bounded.
#   * Standard library only, like the rest of the harness's plumbing; the
#     database is set up with PostgreSQL's own client, psql.
#   * ``cpus`` pins a service to a core list ("1", "0,1", "0-1" or a list of
#     ints), so a harness takes the core layout as arguments: the load
#     generator, the proxy, the app and the database each get their share.

from __future__ import annotations

import contextlib
import grp
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

from benchmarks.harness.process import pid_cpu_seconds

__all__ = ["INSTALL", "NGINX", "PG", "Layout", "Service", "ServiceMissing", "add_cpu_arguments", "cpu_list",
           "cpu_set", "descendants", "free_port", "nginx", "nginx_version", "pin", "postgres", "process_tree_cpu",
           "usable_cpus"]

# What to install, per package manager, named in ServiceMissing's message.
INSTALL: dict[str, str] = {
    "postgres": "PostgreSQL (Debian/Ubuntu: apt-get install postgresql; "
    "Fedora: dnf install postgresql-server; macOS: brew install postgresql)",
    "nginx": "nginx (Debian/Ubuntu: apt-get install nginx-light; "
    "Fedora: dnf install nginx; macOS: brew install nginx)",
}

START_TIMEOUT = 30.0  # seconds a service may take to accept connections
STOP_TIMEOUT = 15.0  # seconds a service may take to stop before SIGKILL
DATABASE = "bench"  # the database postgres() creates
SUPERUSER = "postgres"  # the role initdb creates; trust auth, no password


class ServiceMissing(RuntimeError):
    """A service's binary is not installed; the message names the package to install."""


# --- helpers shared by both services ----------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (bind to port 0, read it back, close).

    Another program may take it before the service binds it; the services
    below then fail to start, with their log in the error.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def cpu_list(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: taskset(1)'s list format, shortest form (the inverse of cpu_set)."""
    runs = [[cpu for _, cpu in run]  # consecutive cpus share cpu - index
            for _, run in itertools.groupby(enumerate(sorted(set(cpus))), lambda pair: pair[1] - pair[0])]
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def cpu_set(cpus: str | Iterable[int]) -> set[int]:
    """``"0,2-3"`` or ``[0, 2, 3]`` -> ``{0, 2, 3}`` (taskset(1)'s list format)."""
    if not isinstance(cpus, str):
        return {int(cpu) for cpu in cpus}
    result: set[int] = set()
    for part in cpus.split(","):
        low, _, high = part.strip().partition("-")
        result.update(range(int(low), int(high or low) + 1))
    return result


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


class Layout:
    """Which cores each part of a run may use: ``Layout(load="1", app="0", db=None)``.

    Each part is a taskset(1) list ("1", "0-2,5") or None (unpinned), and is
    read as an attribute (``layout.db``).  Part V's experiments take their
    layout as ``--cpus-PART`` arguments (:func:`add_cpu_arguments`) and
    record it beside their figures.
    """

    def __init__(self, **cpus: str | None) -> None:
        self.cpus = cpus
        self.__dict__.update(cpus)

    @property
    def key(self) -> str:
        """The layout in words, in its parts' order: ``"load=1 proxy=0 app=0 db=any"``."""
        return " ".join(f"{part}={cpus or 'any'}" for part, cpus in self.cpus.items())

    def prefix(self, part: str) -> list[str]:
        """``taskset -c CPUS`` to put before ``part``'s command; empty when unpinned or without taskset."""
        cpus = self.cpus[part]
        return ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []

    def cores(self, part: str) -> int:
        """How many cores ``part`` may use (every usable one when unpinned)."""
        cpus = self.cpus[part]
        return len(cpu_set(cpus)) if cpus else len(usable_cpus())

    @classmethod
    def from_arguments(cls, args: object, defaults: dict[str, str | None]) -> Layout:
        """The ``--cpus-PART`` options of ``args``: one left out takes its default; ``any`` or ``none``, unpinned."""
        def pick(part: str) -> str | None:
            given = getattr(args, f"cpus_{part}", None)
            return defaults[part] if given is None else (None if given.lower() in ("any", "none") else given)
        return cls(**{part: pick(part) for part in defaults})


def add_cpu_arguments(parser: object, parts: dict[str, str], defaults: dict[str, str | None]) -> None:
    """Give ``parser`` (argparse) a ``--cpus-PART`` option per part; ``parts`` says what each part is."""
    for part, what in parts.items():
        parser.add_argument(f"--cpus-{part}", metavar="CPUS",  # type: ignore[attr-defined]
                            help=f"cores for {what}: a taskset list (0 / 1,2 / 0-3), or any "
                                 f"(default {defaults[part] or 'any'})")


def pin(pid: int, cpus: str | Iterable[int] | None) -> str | None:
    """Pin process ``pid`` and its threads to ``cpus``; returns the list applied, or None.

    ``os.sched_setaffinity`` (sched_setaffinity(2)) sets one thread's mask,
    and a process forked afterwards inherits it; so the services below pin
    their first process with ``taskset -c`` *before* it runs (every child
    inherits the mask), and this function is the fallback, and the tool a
    harness uses on a process it started itself.  Returns None where the
    platform cannot pin (macOS).
    """
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        return None
    mask = cpu_set(cpus)
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else [pid]:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task), mask)
    return ",".join(map(str, sorted(mask)))


def _pin_prefix(cpus: str | Iterable[int] | None) -> tuple[list[str], str | None]:
    """The argv prefix that starts a command pinned to ``cpus``, and the list it pins to."""
    if cpus is None:
        return [], None
    listed = ",".join(map(str, sorted(cpu_set(cpus))))
    taskset = shutil.which("taskset")
    return ([taskset, "-c", listed], listed) if taskset else ([], listed)


def _children() -> dict[int, list[int]]:
    """Parent pid -> its live child pids, read from every /proc/PID/stat once."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields:
                tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name, numbered from 0 = state; None if gone.

    The command name is in parentheses and may hold spaces, so the split
    starts after the last ``)`` (proc(5)).  Index 1 is the parent pid, 11-14
    are utime, stime, cutime, cstime in clock ticks.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) spent by ``pid`` and all its descendants, live or reaped.

    Each live process in the tree adds its own CPU time and the cutime +
    cstime of the children it has waited for (proc(5)): a child that exited
    and was reaped is counted once, in its parent's figure.  Sample it before
    and after a run and subtract; the difference is what the run cost the
    service (the postmaster and its backends, nginx's master and workers).
    Linux only (reads /proc); returns 0.0 when ``pid`` is gone.
    """
    # Discussion: /proc/PID/stat rounds utime and stime down to whole ticks
    # (10 ms) per process, so a pool of ten PostgreSQL backends that each
    # spend 8 ms in a short run would add up to 0; the process's CPU-time
    # clock (harness.process.pid_cpu_seconds) does not.  Reaped children
    # (cutime, cstime) exist only in ticks, but there the kernel sums before
    # it rounds, so the error stays below one tick in all.
    if not os.path.isdir("/proc"):
        return 0.0
    tick = 1 / os.sysconf("SC_CLK_TCK")
    seconds = 0.0
    for current in [pid, *descendants(pid)]:
        if (fields := _stat_fields(current)) is not None:
            own = pid_cpu_seconds(current)
            if own is None:
                own = (int(fields[11]) + int(fields[12])) * tick
            seconds += own + (int(fields[13]) + int(fields[14])) * tick
    return seconds


def descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s live children, their children and so on (from /proc)."""
    tree = _children()
    found, todo = [], list(tree.get(pid, ()))
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(tree.get(current, ()))
    return found


def _stop(process: subprocess.Popen, sig: int, timeout: float = STOP_TIMEOUT) -> None:
    """Send ``sig``, wait up to ``timeout`` seconds, then SIGKILL the process and its children."""
    if process.poll() is None:
        leftovers = descendants(process.pid) if os.path.isdir("/proc") else []
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            for pid in [process.pid, *leftovers]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT)


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen, log: Path, what: str) -> None:
    """Call ``ready()`` until it is true, for at most START_TIMEOUT seconds.

    Raises RuntimeError, with the end of the service's ``log``, when the
    process exits first or the time runs out.
    """
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}:\n{_log_tail(log)}")
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} was not ready in {START_TIMEOUT} s:\n{_log_tail(log)}")


def _accepts(port: int) -> bool:
    """True when a TCP connection to 127.0.0.1:``port`` succeeds (and is closed at once)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Service:
    """What every running service reports; PG and NGINX add their own fields."""

    host: str  # "127.0.0.1"
    port: int  # the TCP port it listens on
    pid: int  # its first process; the others are its children
    version: str  # the binary's own version line: "postgres (PostgreSQL) 15.18 ..."
    directory: str  # the temporary directory holding everything it writes
    cpus: str | None  # the core list it is pinned to, or None
    process: subprocess.Popen = field(repr=False)

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by the service's processes, reaped ones included (process_tree_cpu)."""
        return process_tree_cpu(self.pid)


# --- an unprivileged user for a service run by root ---------------------------

# Discussion: postgres refuses to run as root ("root" execution of the
# PostgreSQL server is not permitted): a server that a client can make run
# code must not hold every privilege.  When the harness runs as root (a
# container, a CI machine), the server runs as an unprivileged user: the
# "postgres" account the distribution's package created, else "nobody".
# subprocess.Popen(user=, group=, extra_groups=[]) switches user in the
# child between fork and exec, which is all `runuser -u` or `setpriv` would
# do, without needing either tool (or PAM) on the machine.  The service's
# temporary directory is handed to that user with chown, and root, the
# client, still reads the files and removes them at the end.


def _service_account(names: Sequence[str] = ("postgres", "nobody")) -> pwd.struct_passwd | None:
    """The first of ``names`` that exists, to run a service as; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in names:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError(f"running as root, and none of the users {', '.join(names)} exists to run a service as")


def _as(account: pwd.struct_passwd | None) -> dict:
    """Popen keyword arguments that run the child as ``account`` (nothing when None)."""
    return {} if account is None else {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


# --- PostgreSQL ----------------------------------------------------------------


def _postgres_bindir() -> Path:
    """The directory holding initdb and postgres: PATH, then pg_config --bindir, then Debian's layout.

    PATH entries are resolved through symlinks (Debian links
    /usr/local/bin/initdb to /usr/lib/postgresql/15/bin/initdb), so psql
    and pg_isready of the same version are found beside them.
    """
    candidates: list[Path] = []
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            candidates.append(Path(out.stdout.strip()))
    # Newest major version first: /usr/lib/postgresql/16/bin before 15.
    versions = sorted(glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(n) for n in re.findall(r"\d+", p)])
    candidates += [Path(p) for p in reversed(versions)]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise ServiceMissing(f"initdb and postgres were not found; install {INSTALL['postgres']}")


def _client(bindir: Path, name: str) -> str:
    """A PostgreSQL client program (psql, pg_isready): beside the server first, then on PATH."""
    if (bindir / name).is_file():
        return str(bindir / name)
    found = shutil.which(name)
    if found is None:
        raise ServiceMissing(f"{name} was not found; install {INSTALL['postgres']}")
    return found


@dataclass
class PG(Service):
    """A running PostgreSQL server (``pid`` is the postmaster) and the database postgres() made in it."""

    socket_dir: str  # directory of the Unix socket .s.PGSQL.PORT
    database: str  # "bench"
    user: str  # "postgres", a superuser, trust authentication
    rows: int  # rows in items(id int primary key, value text), ids 1..rows

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/bench``, for asyncpg, psycopg or psql."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"


def _psql(bindir: Path, port: int, database: str, sql: str) -> str:
    argv = [_client(bindir, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-h", "127.0.0.1", "-p", str(port), "-U", SUPERUSER, "-d", database, "-c", sql]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def _postgres_ready(bindir: Path, port: int) -> Callable[[], bool]:
    """A check that the server accepts sessions, not merely connections: pg_isready(1)'s status 0.

    (1 means it is starting up and rejects sessions; 2, no answer yet.)
    """
    argv = [_client(bindir, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "1"]
    return lambda: subprocess.run(argv, timeout=10).returncode == 0


@contextlib.contextmanager
def postgres(cpus: str | Iterable[int] | None = None, *, rows: int = 1000,
             settings: dict[str, str] | None = None) -> Iterator[PG]:
    """Start a throwaway PostgreSQL server with a table ``items`` of ``rows`` rows; stop it at exit.

    ``cpus``: a core list for the server and every backend it forks (see
    pin).  ``rows``: ids 1..rows in ``items(id int primary key, value text)``
    of the database ``bench``.  ``settings``: extra ``-c name=value`` server
    settings (``{"max_connections": "200"}``).

    Raises ServiceMissing when initdb, postgres, psql or pg_isready is not
    installed, RuntimeError (with the server's log) when it does not start.
    Sources: initdb(1), postgres(1), "Shutting Down the Server" in the
    PostgreSQL documentation (SIGINT is the fast shutdown).
    """
    bindir = _postgres_bindir()
    for client in ("psql", "pg_isready"):
        _client(bindir, client)  # missing -> ServiceMissing before anything starts
    account = _service_account()
    directory = Path(tempfile.mkdtemp(prefix="tinyloop-pg-"))
    process: subprocess.Popen | None = None
    try:
        data, sockets, log = directory / "data", directory / "sockets", directory / "postgres.log"
        sockets.mkdir(mode=0o700)
        if account is not None:
            os.chown(directory, account.pw_uid, account.pw_gid)
            os.chown(sockets, account.pw_uid, account.pw_gid)
        env = {**os.environ, "HOME": str(directory), "LC_ALL": "C"}
        initdb = subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", SUPERUSER,
             "-E", "UTF8", "--locale=C", "--no-sync"],
            capture_output=True, text=True, timeout=120, env=env, **_as(account))
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}):\n{initdb.stdout}{initdb.stderr}")
        port = free_port()
        # Discussion: fsync=off.  The data is thrown away when the block
        # exits, so nothing needs to survive a power cut; what the /db
        # handlers measure is the loop and the driver, and a flush to the
        # disk on every UPDATE's commit would put the disk of a shared
        # machine (and its other tenants) into the figures instead.  Never
        # do this with data you keep.
        options = {"listen_addresses": "127.0.0.1", "fsync": "off", **(settings or {})}
        prefix, pinned = _pin_prefix(cpus)
        argv = [*prefix, str(bindir / "postgres"), "-D", str(data), "-k", str(sockets), "-p", str(port)]
        for name, value in options.items():
            argv += ["-c", f"{name}={value}"]
        with open(log, "wb") as log_file:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT, env=env, **_as(account))
        if cpus is not None and not prefix:
            pinned = pin(process.pid, cpus)
        _wait_until(_postgres_ready(bindir, port), process, log, "postgres")
        _psql(bindir, port, "postgres", f"CREATE DATABASE {DATABASE}")
        _psql(bindir, port, DATABASE,
              "CREATE TABLE items (id int PRIMARY KEY, value text);"
              f"INSERT INTO items SELECT g, 'value ' || g FROM generate_series(1, {int(rows)}) AS g;"
              "ANALYZE items;")
        version = subprocess.run([str(bindir / "postgres"), "-V"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
        yield PG(host="127.0.0.1", port=port, socket_dir=str(sockets), pid=process.pid,
                 version=version, database=DATABASE, user=SUPERUSER, rows=int(rows),
                 directory=str(directory), cpus=pinned, process=process)
    finally:
        if process is not None:
            _stop(process, signal.SIGINT)  # fast shutdown: backends end, no waiting for clients
        shutil.rmtree(directory, ignore_errors=True)


# --- nginx --------------------------------------------------------------------


def _nginx_binary() -> str:
    found = shutil.which("nginx")
    for path in (found, "/usr/sbin/nginx", "/usr/local/sbin/nginx", "/opt/homebrew/bin/nginx"):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ServiceMissing(f"nginx was not found; install {INSTALL['nginx']}")


def nginx_version(binary: str | None = None) -> str:
    """``nginx -v``'s answer, "nginx version: nginx/1.22.1" (it writes it to standard error).

    ``binary`` defaults to the nginx found here; raises ServiceMissing when there is none.
    """
    binary = binary or _nginx_binary()
    out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
    return (out.stderr or out.stdout).strip()


@dataclass
class NGINX(Service):
    """A running nginx (``pid`` is the master) proxying to its upstream servers."""

    upstream_ports: list[int]  # the servers it proxies to, on 127.0.0.1
    workers: int  # worker processes

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"


def nginx_conf(directory: Path, port: int, upstream_ports: Sequence[int], workers: int,
               account: pwd.struct_passwd | None) -> str:
    """The generated nginx.conf: one server on 127.0.0.1:``port`` proxying to the upstreams.

    Every path nginx writes is inside ``directory`` (temp paths included:
    the packaged defaults under /var/lib/nginx may not be writable).  The
    upstream keeps idle connections open (``keepalive``), which needs
    HTTP/1.1 and an empty Connection header toward the upstream
    (ngx_http_upstream_module's documentation); without it nginx opens a
    new connection to the app for every request.
    """
    user = f"user {account.pw_name} {grp.getgrgid(account.pw_gid).gr_name};" if account else ""
    servers = "\n".join(f"        server 127.0.0.1:{p};" for p in upstream_ports)
    temp = "\n".join(f"    {kind}_temp_path {directory / kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""\
# generated by benchmarks/realworld/services.py
{user}
daemon off;
master_process on;
worker_processes {int(workers)};
pid {directory / 'nginx.pid'};
error_log {directory / 'error.log'} warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
{temp}
    upstream app {{
{servers}
        keepalive 128;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(upstream_ports: Sequence[int], listen_port: int = 0, workers: int = 1,
          cpus: str | Iterable[int] | None = None) -> Iterator[NGINX]:
    """Start nginx as a reverse proxy in front of ``upstream_ports`` (on 127.0.0.1); stop it at exit.

    ``listen_port``: its port, 0 for a free one.  ``workers``: worker
    processes (``worker_processes``).  ``cpus``: a core list for the master
    and its workers (see pin).  nginx runs in the foreground
    (``daemon off``) as our child, so its pid is known and its exit seen.

    Raises ServiceMissing when nginx is not installed, RuntimeError (with
    its error log) when it does not start.  Source: nginx(8) ("-p", "-c",
    "-e"; SIGTERM is the fast shutdown), the ngx_core_module and
    ngx_http_upstream_module documentation.
    """
    binary = _nginx_binary()
    version = nginx_version(binary)
    account = _service_account(("nobody",))  # the workers' user; the master stays root
    directory = Path(tempfile.mkdtemp(prefix="tinyloop-nginx-"))
    process: subprocess.Popen | None = None
    try:
        port = listen_port or free_port()
        conf, log = directory / "nginx.conf", directory / "error.log"
        conf.write_text(nginx_conf(directory, port, upstream_ports, workers, account))
        if account is not None:
            # The workers run as that account; the temp paths are theirs.
            os.chmod(directory, 0o755)
        argv = [binary, "-p", str(directory), "-c", str(conf)]
        # "-e" (1.19.5 and newer) names the error log used before the
        # configuration is read; older builds first open their compiled-in
        # path and only warn when it is not writable.
        numbers = [int(n) for n in re.findall(r"\d+", version.partition("/")[2])[:3]]
        if numbers >= [1, 19, 5]:
            argv += ["-e", str(log)]
        prefix, pinned = _pin_prefix(cpus)
        with open(directory / "stderr.log", "wb") as stderr:
            process = subprocess.Popen([*prefix, *argv], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=stderr)
        if cpus is not None and not prefix:
            pinned = pin(process.pid, cpus)
        _wait_until(lambda: _accepts(port), process, log, "nginx")
        yield NGINX(host="127.0.0.1", port=port, upstream_ports=list(upstream_ports),
                    workers=int(workers), pid=process.pid, version=version,
                    directory=str(directory), cpus=pinned, process=process)
    finally:
        if process is not None:
            _stop(process, signal.SIGTERM)  # fast shutdown; SIGQUIT would wait for keep-alive clients
        shutil.rmtree(directory, ignore_errors=True)
