# tinyloop/uv/uv.pxd
#
# The part of libuv's C API that tinyloop.uv calls, declared for Cython: the
# one file that says what we take from "uv.h".  libuv itself is not in the
# repository; the build links the system's copy (pkg-config libuv).
#
# Rules this file keeps:
#   * Declarations only, copied in shape from the documentation at
#     https://docs.libuv.org/en/v1.x/ (the page of each type is named beside
#     it), never from libuv's source: a reader checks each line against the
#     docs.
#   * ``nogil``: none of these functions touch Python objects, so Cython may
#     call them without holding the GIL.  We hold it anyway (every callback
#     calls into Python); the annotation only records that we could drop it.
#   * A struct is declared with the fields we read and no others.  Cython
#     needs no more: the C compiler sees the real struct from uv.h.

from libc.stdint cimport uint64_t, int64_t

cdef extern from "uv.h" nogil:
    # -- Errors (https://docs.libuv.org/en/v1.x/errors.html) ----------------
    # libuv returns 0 or a negative error code: -errno on Unix.
    cdef int UV_EOF
    cdef int UV_EAGAIN
    cdef int UV_ECANCELED
    const char* uv_strerror(int err)

    # -- The loop (loop.html) ---------------------------------------------------
    ctypedef struct uv_loop_t:
        void* data

    ctypedef enum uv_run_mode:
        UV_RUN_DEFAULT = 0
        UV_RUN_ONCE
        UV_RUN_NOWAIT

    int uv_loop_init(uv_loop_t* loop)
    int uv_loop_close(uv_loop_t* loop)
    int uv_run(uv_loop_t* loop, uv_run_mode mode)
    void uv_stop(uv_loop_t* loop)
    void uv_update_time(uv_loop_t* loop)
    uint64_t uv_hrtime()
    # In a fork(2) child that goes on using a loop made in the parent: a new
    # epoll (or kqueue) and wake-up descriptor, every watcher registered anew.
    int uv_loop_fork(uv_loop_t* loop)

    # -- Handles (handle.html) ---------------------------------------------------
    ctypedef enum uv_handle_type:
        UV_TCP
        UV_TIMER
        UV_PROCESS
    ctypedef struct uv_handle_t:
        void* data
        uv_loop_t* loop
        uv_handle_type type

    ctypedef void (*uv_close_cb)(uv_handle_t* handle) with gil
    void uv_close(uv_handle_t* handle, uv_close_cb close_cb)
    int uv_is_closing(const uv_handle_t* handle)
    void uv_unref(uv_handle_t* handle)
    ctypedef void (*uv_walk_cb)(uv_handle_t* handle, void* arg) with gil
    void uv_walk(uv_loop_t* loop, uv_walk_cb walk_cb, void* arg)

    # -- Buffers (misc.html) ------------------------------------------------------
    ctypedef struct uv_buf_t:
        char* base
        size_t len

    # -- Idle and check handles (idle.html, check.html) ---------------------------
    # Both run at fixed points of every iteration: idle just before the loop
    # polls for I/O (an active idle handle makes that poll return at once),
    # check just after.
    ctypedef struct uv_idle_t:
        void* data
    ctypedef struct uv_check_t:
        void* data
    ctypedef void (*uv_idle_cb)(uv_idle_t* handle) with gil
    ctypedef void (*uv_check_cb)(uv_check_t* handle) with gil
    int uv_idle_init(uv_loop_t* loop, uv_idle_t* idle)
    int uv_idle_start(uv_idle_t* idle, uv_idle_cb cb)
    int uv_idle_stop(uv_idle_t* idle)
    int uv_check_init(uv_loop_t* loop, uv_check_t* check)
    int uv_check_start(uv_check_t* check, uv_check_cb cb)
    int uv_check_stop(uv_check_t* check)
    # Prepare runs just before the poll (prepare.html): where tinyloop.trace
    # hears "before the I/O wait", with the timeout libuv will pass to epoll,
    # and where the loop lends the GIL out for the wait.
    ctypedef struct uv_prepare_t:
        void* data
        uv_loop_t* loop
    ctypedef void (*uv_prepare_cb)(uv_prepare_t* handle) with gil
    int uv_prepare_init(uv_loop_t* loop, uv_prepare_t* prepare)
    int uv_prepare_start(uv_prepare_t* prepare, uv_prepare_cb cb)
    int uv_prepare_stop(uv_prepare_t* prepare)
    int uv_backend_timeout(const uv_loop_t* loop)   # ms, -1: no timeout (loop.html)

    # -- Timers (timer.html) --------------------------------------------------------
    # Milliseconds, against uv_now(): the loop's cached time.
    ctypedef struct uv_timer_t:
        void* data
    ctypedef void (*uv_timer_cb)(uv_timer_t* handle) with gil
    int uv_timer_init(uv_loop_t* loop, uv_timer_t* handle)
    int uv_timer_start(uv_timer_t* handle, uv_timer_cb cb, uint64_t timeout, uint64_t repeat)
    int uv_timer_stop(uv_timer_t* handle)

    # -- Async: a wake-up from any thread (async.html) ----------------------------
    ctypedef struct uv_async_t:
        void* data
        # A private field (unix.h): 1 or 2 while a wake-up is being sent or
        # not yet seen.  A fork child inherits it, and uv_async_send sends
        # nothing while it is set, so the child clears it (see _loop.pyx).
        int pending
    ctypedef void (*uv_async_cb)(uv_async_t* handle) with gil
    int uv_async_init(uv_loop_t* loop, uv_async_t* handle, uv_async_cb async_cb)
    int uv_async_send(uv_async_t* handle)

    # -- Poll: readiness of a descriptor we do not own (poll.html) ----------------
    ctypedef struct uv_poll_t:
        void* data
    cdef enum uv_poll_event:
        UV_READABLE = 1
        UV_WRITABLE = 2
        UV_DISCONNECT = 4
    ctypedef void (*uv_poll_cb)(uv_poll_t* handle, int status, int events) with gil
    int uv_poll_init_socket(uv_loop_t* loop, uv_poll_t* handle, int socket)
    int uv_poll_start(uv_poll_t* handle, int events, uv_poll_cb cb)
    int uv_poll_stop(uv_poll_t* poll)

    # -- Streams and TCP (stream.html, tcp.html) --------------------------------------
    ctypedef struct uv_stream_t:
        void* data
        uv_loop_t* loop
    ctypedef struct uv_tcp_t:
        void* data
    ctypedef struct uv_write_t:
        void* data

    ctypedef void (*uv_alloc_cb)(uv_handle_t* handle, size_t suggested_size, uv_buf_t* buf) with gil
    ctypedef void (*uv_read_cb)(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) with gil
    ctypedef void (*uv_write_cb)(uv_write_t* req, int status) with gil

    int uv_tcp_init(uv_loop_t* loop, uv_tcp_t* handle)
    int uv_tcp_open(uv_tcp_t* handle, int sock)
    int uv_read_start(uv_stream_t* stream, uv_alloc_cb alloc_cb, uv_read_cb read_cb)
    int uv_read_stop(uv_stream_t* stream)
    int uv_try_write(uv_stream_t* handle, const uv_buf_t bufs[], unsigned int nbufs)
    int uv_write(uv_write_t* req, uv_stream_t* handle, const uv_buf_t bufs[],
                 unsigned int nbufs, uv_write_cb cb)
    size_t uv_stream_get_write_queue_size(const uv_stream_t* stream)

    # -- Processes (process.html) -------------------------------------------------------
    # uv_spawn starts a child and returns once it has called exec (or failed
    # to: the error comes back as the return value); libuv learns of the exit
    # from SIGCHLD, reaps the child with waitpid(2), and calls exit_cb in the
    # loop's thread.  stdio[i] becomes the child's descriptor i.
    ctypedef struct uv_process_t:
        void* data
        int pid
    ctypedef void (*uv_exit_cb)(uv_process_t* process, int64_t exit_status, int term_signal) with gil

    cdef enum uv_stdio_flags:
        UV_IGNORE
        UV_INHERIT_FD
    ctypedef union uv_stdio_container_data:
        int fd
    ctypedef struct uv_stdio_container_t:
        uv_stdio_flags flags
        uv_stdio_container_data data

    cdef enum uv_process_flags:
        UV_PROCESS_DETACHED    # setsid(2) in the child: Popen's start_new_session
    ctypedef struct uv_process_options_t:
        uv_exit_cb exit_cb
        const char* file       # execvp(3)'s file: searched in the PATH of env (or of ours)
        char** args            # argv, NULL-terminated
        char** env             # "NAME=value", NULL-terminated; NULL: inherit ours
        const char* cwd        # NULL: ours
        unsigned int flags
        int stdio_count
        uv_stdio_container_t* stdio

    int uv_spawn(uv_loop_t* loop, uv_process_t* handle, const uv_process_options_t* options)
    int uv_process_kill(uv_process_t* handle, int signum)
