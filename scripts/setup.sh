#!/usr/bin/env bash
# scripts/setup.sh — make this checkout ready to run: the system tools the
# benchmarks and tests drive (ab, wrk, a C compiler, libuv, liburing, bubblewrap for grade's sandbox; Chromium for the
# book's browser test, nginx and PostgreSQL for Part V's experiments, all
# three optional), and a virtual
# environment in .venv with tinyloop and its development extras installed,
# and Part IV's extension (tinyloop/uv) built in place and kept up to date.
#
# Sourced by scripts/test.sh and scripts/benchmark.sh; safe to run again (each
# step is skipped when it is already done).  Exports TINYLOOP_PYTHON.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# --- system packages -------------------------------------------------------
# command -> package name, per package manager.
need_tools() {
    local missing=()
    command -v ab >/dev/null 2>&1 || missing+=(ab)
    command -v wrk >/dev/null 2>&1 || missing+=(wrk)
    command -v cc >/dev/null 2>&1 || missing+=(cc)
    command -v dot >/dev/null 2>&1 || missing+=(dot)   # graphviz: the book's static diagrams (sphinx.ext.graphviz)
    # bubblewrap: the sandbox around every check that `grade` runs (Linux only)
    [ "$(uname -s)" != Linux ] || command -v bwrap >/dev/null 2>&1 || missing+=(bwrap)
    if ! { [ -e /usr/include/uv.h ] || [ -e /usr/local/include/uv.h ] || [ -e /opt/homebrew/include/uv.h ]; }; then
        missing+=(libuv)
    fi
    # liburing (Linux): the C floor on io_uring, benchmarks/peers/c/http_uring_floor.c
    [ "$(uname -s)" != Linux ] || [ -e /usr/include/liburing.h ] || [ -e /usr/local/include/liburing.h ] ||
        missing+=(liburing)
    printf '%s\n' "${missing[@]}"
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo "$@"
    else return 1
    fi
}

install_system_packages() {
    local missing
    missing=$(need_tools)
    [ -z "$missing" ] && return 0
    local pkgs=()
    if command -v apt-get >/dev/null 2>&1; then
        for tool in $missing; do case $tool in
            ab) pkgs+=(apache2-utils) ;; wrk) pkgs+=(wrk) ;; cc) pkgs+=(gcc libc6-dev) ;; libuv) pkgs+=(libuv1-dev) ;;
            dot) pkgs+=(graphviz) ;; bwrap) pkgs+=(bubblewrap) ;; liburing) pkgs+=(liburing-dev) ;;
        esac; done
        say "installing ${pkgs[*]} with apt-get"
        if as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null 2>&1 ||
           { as_root apt-get update -q >/dev/null 2>&1 &&
             as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; }; then
            return 0
        fi
    elif command -v dnf >/dev/null 2>&1; then
        for tool in $missing; do case $tool in
            ab) pkgs+=(httpd-tools) ;; wrk) pkgs+=(wrk) ;; cc) pkgs+=(gcc) ;; libuv) pkgs+=(libuv-devel) ;;
            dot) pkgs+=(graphviz) ;; bwrap) pkgs+=(bubblewrap) ;; liburing) pkgs+=(liburing-devel) ;;
        esac; done
        say "installing ${pkgs[*]} with dnf"
        as_root dnf install -y -q "${pkgs[@]}" && return 0
    elif command -v brew >/dev/null 2>&1; then
        # macOS ships ab and a compiler; Homebrew brings the rest.
        for tool in $missing; do case $tool in wrk) pkgs+=(wrk) ;; libuv) pkgs+=(libuv) ;; dot) pkgs+=(graphviz) ;; esac; done
        if [ ${#pkgs[@]} -gt 0 ]; then say "installing ${pkgs[*]} with brew"; brew install "${pkgs[@]}" && return 0; fi
    fi
    missing=$(need_tools)
    [ -z "$missing" ] && return 0
    say "could not install: $(echo $missing | tr '\n' ' ')"
    say "please install them by hand: ApacheBench (ab; Debian: apache2-utils), wrk, a C compiler, libuv (headers), graphviz (dot), bubblewrap (bwrap, Linux), liburing (headers, Linux)"
    return 1
}

# --- a browser for the book's test -------------------------------------------
# tests/test_browser.py loads the built book in headless Chromium.  Optional:
# without it that test is skipped (it says so), and nothing else needs it.
have_browser() {
    local name
    for name in chromium chromium-browser google-chrome google-chrome-stable; do
        command -v "$name" >/dev/null 2>&1 && return 0
    done
    [ -d "/Applications/Chromium.app" ] || [ -d "/Applications/Google Chrome.app" ]
}

install_browser() {
    have_browser && return 0
    if command -v apt-get >/dev/null 2>&1; then
        say "installing chromium with apt-get (for tests/test_browser.py)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 ||
            { as_root apt-get update -q >/dev/null 2>&1 &&
              as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; } || true
    elif command -v dnf >/dev/null 2>&1; then
        say "installing chromium with dnf (for tests/test_browser.py)"
        as_root dnf install -y -q chromium >/dev/null 2>&1 || true
    elif command -v brew >/dev/null 2>&1; then
        say "installing chromium with brew (for tests/test_browser.py)"
        brew install --cask chromium >/dev/null 2>&1 || true
    fi
    have_browser && return 0
    say "no Chromium: tests/test_browser.py will be skipped (install chromium to run it)"
}

# --- tmux, for the live panel's test -------------------------------------------
# tests/test_trace_stats.py runs `serve --stats` in tmux and reads the screen
# with capture-pane.  Optional: without tmux that test is skipped (it says so).
install_tmux() {
    command -v tmux >/dev/null 2>&1 && return 0
    if command -v apt-get >/dev/null 2>&1; then
        say "installing tmux with apt-get (for tests/test_trace_stats.py)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q tmux >/dev/null 2>&1 ||
            { as_root apt-get update -q >/dev/null 2>&1 &&
              as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q tmux >/dev/null 2>&1; } || true
    elif command -v dnf >/dev/null 2>&1; then
        as_root dnf install -y -q tmux >/dev/null 2>&1 || true
    elif command -v brew >/dev/null 2>&1; then
        brew install tmux >/dev/null 2>&1 || true
    fi
    command -v tmux >/dev/null 2>&1 ||
        say "no tmux: tests/test_trace_stats.py will be skipped (install tmux to run it)"
}

# --- linters for the class templates' tests ------------------------------------
# tests/test_exercise_classroom.py and test_exercise_gradescope.py lint what
# `classroom` and `gradescope` write: the workflow with actionlint (a Go
# tool, built from the Go module proxy where Go is), the shell scripts with
# Debian's shellcheck.  Optional: without them those checks are skipped,
# and say so.
ACTIONLINT_VERSION=v1.7.12
install_linters() {
    local go gopath
    if ! command -v shellcheck >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        say "installing shellcheck with apt-get (for the class templates' tests)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck >/dev/null 2>&1 ||
            { as_root apt-get update -q >/dev/null 2>&1 &&
              as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck >/dev/null 2>&1; } || true
    fi
    go=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
    if [ -n "$go" ]; then
        gopath=$("$go" env GOPATH)
        if ! command -v actionlint >/dev/null 2>&1 && [ ! -x "$gopath/bin/actionlint" ]; then
            say "installing actionlint $ACTIONLINT_VERSION with go install (for tests/test_exercise_classroom.py)"
            "$go" install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" >/dev/null 2>&1 ||
                say "actionlint did not install: the workflow's lint test will be skipped"
        fi
    else
        command -v actionlint >/dev/null 2>&1 ||
            say "no Go: actionlint is not installed, and the workflow's lint test will be skipped"
    fi
}

# --- real services for Part V ------------------------------------------------
# benchmarks/realworld/services.py starts nginx and PostgreSQL from the system
# packages.  Optional: without them their tests and benchmark rows are
# skipped with a message naming the package, and nothing else needs them.
have_nginx() {
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || [ -x /usr/local/sbin/nginx ]
}

have_postgres() {
    # pg_config alone may come from the client headers (Debian's libpq-dev): look for initdb.
    command -v initdb >/dev/null 2>&1 ||
        { command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; } ||
        compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

install_services() {
    local pkgs=()
    if command -v apt-get >/dev/null 2>&1; then
        have_nginx || pkgs+=(nginx-light)
        have_postgres || pkgs+=(postgresql)
        [ ${#pkgs[@]} -eq 0 ] && return 0
        say "installing ${pkgs[*]} with apt-get (for Part V's experiments)"
        # nginx-light is gone from newer releases, where plain nginx is as small.
        for choice in "${pkgs[*]}" "$(echo "${pkgs[*]}" | sed 's/nginx-light/nginx/')"; do
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $choice >/dev/null 2>&1 ||
                { as_root apt-get update -q >/dev/null 2>&1 &&
                  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $choice >/dev/null 2>&1; } && break
        done || true
    elif command -v dnf >/dev/null 2>&1; then
        have_nginx || pkgs+=(nginx)
        have_postgres || pkgs+=(postgresql-server)
        [ ${#pkgs[@]} -eq 0 ] && return 0
        say "installing ${pkgs[*]} with dnf (for Part V's experiments)"
        as_root dnf install -y -q "${pkgs[@]}" >/dev/null 2>&1 || true
    elif command -v brew >/dev/null 2>&1; then
        have_nginx || pkgs+=(nginx)
        have_postgres || pkgs+=(postgresql)
        [ ${#pkgs[@]} -eq 0 ] && return 0
        say "installing ${pkgs[*]} with brew (for Part V's experiments)"
        brew install "${pkgs[@]}" >/dev/null 2>&1 || true
    fi
    have_nginx || say "no nginx: Part V's proxy rows will be skipped (Debian: apt-get install nginx-light; dnf: nginx; brew: nginx)"
    have_postgres || say "no PostgreSQL: Part V's database rows will be skipped (Debian: apt-get install postgresql; dnf: postgresql-server; brew: postgresql)"
    return 0
}

# --- the virtual environment ----------------------------------------------
find_python() {
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    say "tinyloop needs Python 3.11 or newer (set PYTHON=/path/to/python3.11 to choose one)"
    return 1
}

make_venv() {
    local python stamp want
    python=$(find_python)
    if [ ! -x .venv/bin/python ]; then
        say "creating .venv with $($python --version)"
        "$python" -m venv .venv || { say "python -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
    fi
    # Reinstall only when the declared dependencies change.
    want=$(cat pyproject.toml | cksum)
    stamp=.venv/.tinyloop-installed
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        say "installing tinyloop and its development dependencies into .venv"
        .venv/bin/python -m pip install -q --upgrade pip >/dev/null
        .venv/bin/python -m pip install -q -e '.[dev]'
        echo "$want" > "$stamp"
    fi
}

# --- Part IV's and Part VI's extensions --------------------------------------------
# pip install -e builds tinyloop/uv/_loop*.so and tinyloop/ring/_uring*.so in
# place (setup.py), but the stamp above only tracks pyproject.toml: a changed
# .pyx or .pxd would be left unbuilt, and the tests would run the old
# extension.  Rebuild one when any of its sources is newer than it, or when
# there is none and its C library is here.  Optional: without libuv Part IV's
# tests are skipped, without liburing tinyloop.ring runs its pure-Python core;
# each says what to install.
have_libuv() {
    { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libuv; } ||
        [ -e /usr/include/uv.h ] || [ -e /usr/local/include/uv.h ] || [ -e /opt/homebrew/include/uv.h ]
}

have_liburing() {
    { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists liburing; } ||
        [ -e /usr/include/liburing.h ] || [ -e /usr/local/include/liburing.h ]
}

# build_extension FOLDER MODULE HAVE_LIBRARY WHAT WITHOUT_IT INSTALL
build_extension() {
    local folder=$1 module=$2 have=$3 what=$4 without=$5 install=$6 built="" so
    for so in "$folder/$module"*.so; do
        [ -e "$so" ] && built=$so && break
    done
    if [ -n "$built" ]; then
        [ -n "$(find "$folder" -maxdepth 1 \( -name '*.pyx' -o -name '*.pxd' \) -newer "$built" -print -quit)" ] ||
            return 0
        say "rebuilding $what: its Cython sources changed since $built was built"
    else
        "$have" || { say "$what is not built (its C library is missing), and $without ($install)"; return 0; }
        say "building $what (its C library is here, the extension is not)"
    fi
    "$TINYLOOP_PYTHON" setup.py build_ext --inplace -q >/dev/null ||
        say "$what did not build (setup.py's output above): $without"
}

build_uv() {
    build_extension tinyloop/uv _loop have_libuv tinyloop.uv "its tests will be skipped" \
        "Debian: apt-get install libuv1-dev"
}

build_ring() {
    [ "$(uname -s)" = Linux ] || return 0  # io_uring is Linux's
    build_extension tinyloop/ring _uring have_liburing "tinyloop.ring's Cython core" \
        "tinyloop.ring runs its pure-Python core" "Debian: apt-get install liburing-dev"
}

# --- peers only the benchmarks need ----------------------------------------------
# uringcore (Part VI's peer) has no wheel: pip builds it with Rust's cargo,
# about a quarter of an hour on two cores.  So only the benchmark command
# asks for it (scripts/benchmark.sh calls this), never the test command;
# once built, pip's cache keeps the wheel.  Optional: without it its rows are skipped.
install_benchmark_peers() {
    [ "$(uname -s)" = Linux ] || return 0
    "$TINYLOOP_PYTHON" -c 'import uringcore' >/dev/null 2>&1 && return 0
    say "installing uringcore (Part VI's peer; builds with Rust's cargo, once)"
    "$TINYLOOP_PYTHON" -m pip install -q -e '.[uringcore]' >/dev/null 2>&1 ||
        say "uringcore did not install (it builds from source with Rust's cargo): its benchmark rows will be skipped"
}

install_system_packages
install_browser
install_tmux
install_linters
install_services
make_venv
export TINYLOOP_PYTHON="$PWD/.venv/bin/python"
build_uv
build_ring
