# setup.py
#
# Builds Part IV's extension, tinyloop.uv._loop (Cython on libuv), and
# Part VI's, tinyloop.ring._uring (Cython on liburing, Linux), each when it
# can; everything else in tinyloop is pure Python and is described by
# pyproject.toml alone.
#
# Rules this file keeps:
#   * libuv is the system's, found with pkg-config (Debian: libuv1-dev,
#     Fedora: libuv-devel, Homebrew: libuv); its source is never copied here.
#   * Without libuv or a C compiler the package still installs: the
#     extension is optional, and ``import tinyloop.uv`` then raises an
#     ImportError that says what to install (tinyloop/uv/loop.py).  Without
#     liburing, tinyloop.ring runs its pure-Python core (tinyloop/ring/core.py).
#   * TINYLOOP_UV_DEBUG=1 at build time makes the debug build: C assertions
#     on, and the count of live libuv handles checked at loop.close().
#     TINYLOOP_UV_CFLAGS adds compiler flags (e.g. -fsanitize=address).

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup


def library_flags(package, header, library):
    """(include_dirs, library_dirs, libraries) for the C library pkg-config calls ``package``
    (``header`` and ``library`` where pkg-config is missing), or None if it is not installed."""
    if shutil.which("pkg-config"):
        try:
            cflags = subprocess.run(["pkg-config", "--cflags", package], check=True,
                                    capture_output=True, text=True).stdout.split()
            libs = subprocess.run(["pkg-config", "--libs", package], check=True,
                                  capture_output=True, text=True).stdout.split()
        except subprocess.CalledProcessError:
            pass
        else:
            return ([f[2:] for f in cflags if f.startswith("-I")],
                    [f[2:] for f in libs if f.startswith("-L")],
                    [f[2:] for f in libs if f.startswith("-l")])
    for prefix in ("/usr", "/usr/local", "/opt/homebrew"):
        if os.path.exists(os.path.join(prefix, "include", header)):
            return [os.path.join(prefix, "include")], [os.path.join(prefix, "lib")], [library]
    return None


def ring_extension():
    """tinyloop.ring._uring's Extension on the system's liburing, or None (not Linux, no liburing,
    or a copy of the tree without its source, as the exercises' and variants' builds make)."""
    if not os.path.exists(os.path.join("tinyloop", "ring", "_uring.pyx")):
        return None
    flags = library_flags("liburing", "liburing.h", "uring") if sys.platform.startswith("linux") else None
    if flags is None:
        if sys.platform.startswith("linux"):
            print("tinyloop: liburing not found (pkg-config liburing); tinyloop.ring runs its pure-Python "
                  "core. Install liburing's headers (Debian: apt-get install liburing-dev; Fedora: dnf "
                  "install liburing-devel) and reinstall to build its Cython core.", file=sys.stderr)
        return None
    include_dirs, library_dirs, libraries = flags
    return Extension("tinyloop.ring._uring", ["tinyloop/ring/_uring.pyx"], include_dirs=include_dirs,
                     library_dirs=library_dirs, libraries=libraries, define_macros=[("NDEBUG", "1")],
                     extra_compile_args=["-O2"], optional=True)


def uv_extension(debug):
    """tinyloop.uv._loop's Extension on the system's libuv, or None (no libuv)."""
    flags = library_flags("libuv", "uv.h", "uv")
    if flags is None:
        print("tinyloop: libuv not found (pkg-config libuv); building without tinyloop.uv. "
              "Install libuv's headers (Debian: apt-get install libuv1-dev; Fedora: dnf install "
              "libuv-devel; macOS: brew install libuv) and reinstall to build it.", file=sys.stderr)
        return None
    include_dirs, library_dirs, libraries = flags
    return Extension(
        "tinyloop.uv._loop", ["tinyloop/uv/_loop.pyx"],
        include_dirs=include_dirs, library_dirs=library_dirs, libraries=libraries,
        define_macros=[("TINYLOOP_UV_DEBUG", "1")] if debug else [("NDEBUG", "1")],
        extra_compile_args=(["-O0", "-g", "-UNDEBUG"] if debug else ["-O2"])
        + shlex.split(os.environ.get("TINYLOOP_UV_CFLAGS", "")),
        extra_link_args=shlex.split(os.environ.get("TINYLOOP_UV_CFLAGS", "")),
        optional=True,   # a failed compile leaves the pure-Python package working
    )


def extensions():
    debug = os.environ.get("TINYLOOP_UV_DEBUG", "") not in ("", "0")
    modules = [module for module in (uv_extension(debug), ring_extension()) if module is not None]
    if not modules:
        return []
    from Cython.Build import cythonize

    return cythonize(modules, language_level=3, quiet=True,
                     compiler_directives={"boundscheck": debug, "wraparound": False,
                                          "embedsignature": True})


setup(ext_modules=extensions())
