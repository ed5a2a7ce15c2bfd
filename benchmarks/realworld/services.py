# benchmarks/realworld/services.py
"""PostgreSQL and nginx, the real services beside Part V's Python servers.

    with postgres(rows=1000) as pg:      # initdb, start, create bench.items
        ... asyncpg.create_pool(pg.dsn) ...
    with nginx([app_port]) as proxy:     # a generated nginx.conf, one upstream
        ... wrk {proxy.url} ...

The system's binaries (scripts/setup.sh installs them); a missing one raises ServiceMissing naming
the package.  A service listens on 127.0.0.1 and writes only into its own temporary directory, which
goes at exit.  mirakuru's executors start it, wait until it is ready and stop it (then kill every
process it started).  ``cpus`` pins a service and its children (a taskset(1) list).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from glob import glob
from pathlib import Path

import psutil
import psycopg
from mirakuru import Executor, TCPExecutor
from mirakuru.exceptions import ExecutorError

from benchmarks.harness.layout import taskset
from benchmarks.harness.machine import version_line
from benchmarks.harness.process import pid_cpu_seconds

__all__ = ["Service", "ServiceMissing", "free_port", "nginx", "nginx_version", "postgres",
           "process_tree_cpu", "running", "tail"]

TIMEOUT = 30.0  # seconds a service may take to be ready, and again to stop before SIGKILL
DATABASE = "bench"  # the database postgres() creates
SUPERUSER = "postgres"  # the role initdb creates; trust authentication, no password


class ServiceMissing(RuntimeError):
    """A service's binary is not installed; the message names the package to install."""


@dataclass
class Service:
    """A running service on 127.0.0.1:``port``; ``pid`` is its first process."""

    port: int
    pid: int
    version: str  # the binary's own version line: "postgres (PostgreSQL) 15.18 ..."
    directory: str  # the temporary directory holding everything it writes
    rows: int = 0  # PostgreSQL: ids 1..rows in items(id int primary key, value text)

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/bench``, for asyncpg or psycopg."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"


def free_port() -> int:
    """A TCP port nothing listens on now on 127.0.0.1 (bind to port 0, read it back, close)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) spent by ``pid`` and all its descendants, live or reaped; 0.0 if gone.

    Each live process adds its own CPU time (harness.process.pid_cpu_seconds: /proc's 10 ms ticks
    would sum ten backends of 8 ms each to 0) and the cutime + cstime of the children it reaped
    (proc(5)), so a backend that exited counts once, in its parent.  Subtract two samples.
    """
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    seconds = 0.0
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            own = pid_cpu_seconds(process.pid)
            seconds += times.user + times.system if own is None else own
            seconds += times.children_user + times.children_system
    return seconds


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of the log file ``path``; "(no log)" when there is none."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


@contextlib.contextmanager
def running(executor: Executor, log: Path, what: str) -> Iterator[Executor]:
    """Start ``executor``, wait until it is ready, yield it; at exit stop it and kill what it started.

    Raises RuntimeError, with the end of ``log``, when it exits first or is not ready in time.
    """
    try:
        try:
            executor.start()
        except ExecutorError as error:
            raise RuntimeError(f"{what} did not start: {error}\n{tail(log)}") from None
        yield executor
    finally:
        with contextlib.suppress(ExecutorError):  # an exit status other than the signal's
            executor.stop()
        executor.kill()


def _account(names: Sequence[str]) -> tuple[pwd.struct_passwd | None, dict]:
    """As root, the first of ``names`` that exists and the Popen arguments that run a child as it;
    ``(None, {})`` when we are not root.  (postgres refuses to run as root; so do nginx's workers.)"""
    if os.geteuid() != 0:
        return None, {}
    for name in names:
        with contextlib.suppress(KeyError):
            account = pwd.getpwnam(name)
            return account, {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    raise RuntimeError(f"running as root, and none of the users {', '.join(names)} exists to run a service as")


def _postgres_bindir() -> Path:
    """initdb's and postgres's directory: PATH's initdb (through symlinks), else Debian's
    /usr/lib/postgresql/N/bin, newest first.  Raises ServiceMissing when none has both."""
    candidates = [Path(initdb).resolve().parent] if (initdb := shutil.which("initdb")) else []
    versions = sorted(glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(n) for n in re.findall(r"\d+", p)])
    for directory in [*candidates, *map(Path, reversed(versions))]:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise ServiceMissing("initdb and postgres were not found; install PostgreSQL (Debian/Ubuntu: "
                         "apt-get install postgresql; Fedora: dnf install postgresql-server; "
                         "macOS: brew install postgresql)")


class _Postgres(TCPExecutor):
    """Ready when the server accepts a session, not merely a connection (it refuses them while starting)."""

    def after_start_check(self) -> bool:
        try:
            psycopg.connect(host=self.host, port=self.port, user=SUPERUSER, dbname="postgres",
                            connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True


@contextlib.contextmanager
def postgres(cpus: str | None = None, *, rows: int = 1000,
             settings: dict[str, str] | None = None) -> Iterator[Service]:
    """A throwaway PostgreSQL server with a table ``items`` of ``rows`` rows; stopped and removed at exit.

    ``cpus``: a taskset(1) list for the server and its backends.  ``rows``: ids 1..rows in
    ``items(id int primary key, value text)`` of the database ``bench``, values ``"value ID"``.
    ``settings``: extra server settings (``{"max_connections": "200"}``).  Raises ServiceMissing
    when PostgreSQL is not installed, RuntimeError (with its log) when it does not start.  Sources:
    initdb(1), postgres(1), "Shutting Down the Server" (SIGINT is the fast shutdown).
    """
    bindir = _postgres_bindir()
    account, as_account = _account(("postgres", "nobody"))
    directory = Path(tempfile.mkdtemp(prefix="tinyloop-pg-"))
    try:
        if account is not None:
            os.chown(directory, account.pw_uid, account.pw_gid)
        data, log = directory / "data", directory / "postgres.log"
        env = {"HOME": str(directory), "LC_ALL": "C"}
        initdb = subprocess.run([bindir / "initdb", "-D", data, "-A", "trust", "-U", SUPERUSER, "-E", "UTF8",
                                 "--locale=C", "--no-sync"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, **env}, **as_account)
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}):\n{initdb.stdout}{initdb.stderr}")
        port = free_port()
        # fsync=off: the data is thrown away at exit, and the handlers measure the loop and the
        # driver, not a flush to the shared machine's disk on every commit.
        options = {"listen_addresses": "127.0.0.1", "fsync": "off", **(settings or {})}
        argv = [*taskset(cpus), str(bindir / "postgres"), "-D", str(data), "-k", str(directory),
                "-p", str(port), *[word for name, value in options.items() for word in ("-c", f"{name}={value}")]]
        with open(log, "wb") as out, running(_Postgres(
                argv, "127.0.0.1", port, timeout=TIMEOUT, stop_signal=signal.SIGINT, envvars=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, popen_kwargs=as_account),
                log, "postgres") as server:
            admin = {"host": "127.0.0.1", "port": port, "user": SUPERUSER, "autocommit": True}
            with psycopg.connect(**admin, dbname="postgres") as connection:
                connection.execute(f"CREATE DATABASE {DATABASE}")
            with psycopg.connect(**admin, dbname=DATABASE) as connection:
                connection.execute("CREATE TABLE items (id int PRIMARY KEY, value text)")
                connection.execute("INSERT INTO items SELECT g, 'value ' || g FROM generate_series(1, %s) AS g",
                                   (int(rows),))
                connection.execute("ANALYZE items")
            version = version_line([str(bindir / "postgres"), "-V"]) or "postgres"
            yield Service(port, server.process.pid, version, str(directory), int(rows))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _nginx_binary() -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/opt/homebrew/bin"])
    if binary := shutil.which("nginx", path=path):
        return binary
    raise ServiceMissing("nginx was not found; install nginx (Debian/Ubuntu: apt-get install nginx-light; "
                         "Fedora: dnf install nginx; macOS: brew install nginx)")


def nginx_version(binary: str | None = None) -> str:
    """``nginx -v``'s line, "nginx version: nginx/1.22.1", of ``binary`` (default: the nginx found
    here).  Raises ServiceMissing when there is none."""
    return version_line([binary or _nginx_binary(), "-v"]) or "nginx"


def nginx_conf(directory: Path, port: int, upstream_ports: Sequence[int], workers: int,
               account: pwd.struct_passwd | None) -> str:
    """nginx.conf for one server on 127.0.0.1:``port`` proxying to the upstreams on 127.0.0.1.

    Every path nginx writes is inside ``directory``.  The upstream keeps idle connections open
    (``keepalive``: HTTP/1.1 and an empty Connection header toward it; ngx_http_upstream_module).
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
def nginx(upstream_ports: Sequence[int], workers: int = 1, cpus: str | None = None) -> Iterator[Service]:
    """nginx as a reverse proxy in front of ``upstream_ports`` on 127.0.0.1, on a free port; stopped at exit.

    ``workers``: its worker processes.  ``cpus``: a taskset(1) list for all of them.  It runs in
    the foreground (``daemon off``) as our child.  Raises ServiceMissing when nginx is not
    installed, RuntimeError (with its error log) when it does not start.  Source: nginx(8).
    """
    binary = _nginx_binary()
    version = nginx_version(binary)
    account, _ = _account(("nobody",))  # the workers' user; the master stays root
    directory = Path(tempfile.mkdtemp(prefix="tinyloop-nginx-"))
    try:
        port, conf, log = free_port(), directory / "nginx.conf", directory / "error.log"
        conf.write_text(nginx_conf(directory, port, upstream_ports, workers, account))
        if account is not None:
            os.chmod(directory, 0o755)  # the workers write their temp paths
        argv = [*taskset(cpus), binary, "-p", str(directory), "-c", str(conf)]
        # -e (nginx 1.19.5 and newer) names the log used before the configuration is read.
        if [int(n) for n in re.findall(r"\d+", version)[:3]] >= [1, 19, 5]:
            argv += ["-e", str(log)]
        with open(log, "ab") as out, running(TCPExecutor(
                argv, "127.0.0.1", port, timeout=TIMEOUT, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT), log, "nginx") as server:
            yield Service(port, server.process.pid, version, str(directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
