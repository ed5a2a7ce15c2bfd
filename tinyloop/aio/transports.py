"""Flow control on the write side, written once for every transport that
buffers: sockets, datagrams, pipes.  (TLS keeps no buffer of its own: its
records go straight to the socket transport, whose marks the application
then hears through sslproto.py.)  CPython's Lib/asyncio/transports.py holds
the abstract transports (BaseTransport, Transport, DatagramTransport, ...)
and this same mixin; the abstract classes we import from asyncio, because
programs check ``isinstance(transport, asyncio.Transport)``.

The contract (asyncio docs, "Transports and Protocols", "Flow Control"):

    buffer size      what happens
    -----------      ------------------------------------------------------
    rises above      protocol.pause_writing() is called, once
      high water
    falls to or      protocol.resume_writing() is called, once, and only
      below low        if pause_writing was called
      water

A protocol that keeps writing after pause_writing is not stopped: the
marks are advice.  asyncio's StreamWriter.drain() is built on this pair.

Rules this file keeps:
  * The marks are in bytes.  high defaults to 64 KiB and low to a quarter
    of high, as in asyncio; set_write_buffer_limits(high=0) makes every
    write that leaves a byte unsent pause the protocol.
  * A protocol's pause_writing/resume_writing that raises is reported
    through the loop's exception handler and changes nothing else.

Also here, for every transport: in debug mode a transport keeps
``_source_traceback`` (where it was made, asyncio's name for it), and the
warning about a transport nobody closed says where that was.
"""

from __future__ import annotations

import asyncio.format_helpers
import sys
import traceback
from typing import Any

__all__ = ["DEFAULT_HIGH_WATER", "FlowControlMixin", "source_traceback", "unclosed_message"]

DEFAULT_HIGH_WATER = 64 * 1024


def source_traceback(loop: Any) -> list[traceback.FrameSummary] | None:
    """In debug mode, the stack of whoever is making a transport (innermost last,
    the transport's own __init__ methods left out); None outside debug mode."""
    if not loop.get_debug():
        return None
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_name == "__init__":
        frame = frame.f_back  # a subclass's __init__ calling its base's: not news
    return asyncio.format_helpers.extract_stack(frame)


def unclosed_message(transport: Any) -> str:
    """The ResourceWarning's text for a transport collected while open; in debug
    mode it ends with where the transport was made."""
    message = f"unclosed transport {transport!r}"
    stack = getattr(transport, "_source_traceback", None)
    if stack:
        message += ("; object created at (most recent call last):\n"
                    + "".join(traceback.format_list(stack)).rstrip())
    return message


class FlowControlMixin:
    """High- and low-water marks on a transport's write buffer (in bytes).

    The class using it sets ``self._loop`` and ``self._protocol`` and
    implements ``get_write_buffer_size()``; it calls
    :meth:`_maybe_pause_protocol` after adding to its buffer and
    :meth:`_maybe_resume_protocol` after taking from it.
    """

    _loop: Any
    _protocol: Any

    def __init__(self, extra: dict[str, Any] | None = None, loop: Any = None) -> None:
        super().__init__(extra)  # asyncio.BaseTransport keeps ``extra``
        self._loop = loop
        self._protocol_paused = False
        self._set_write_buffer_limits()

    def get_write_buffer_size(self) -> int:
        raise NotImplementedError

    def _maybe_pause_protocol(self) -> None:
        if self._protocol_paused or self.get_write_buffer_size() <= self._high_water:
            return
        self._protocol_paused = True
        try:
            self._protocol.pause_writing()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler({
                "message": "protocol.pause_writing() failed",
                "exception": exc, "transport": self, "protocol": self._protocol,
            })

    def _maybe_resume_protocol(self) -> None:
        if not self._protocol_paused or self.get_write_buffer_size() > self._low_water:
            return
        self._protocol_paused = False
        try:
            self._protocol.resume_writing()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler({
                "message": "protocol.resume_writing() failed",
                "exception": exc, "transport": self, "protocol": self._protocol,
            })

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """``(low, high)``, in bytes."""
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = DEFAULT_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high_water = high
        self._low_water = low

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Set the marks, in bytes; None takes the default (see the table above).

        Raises ValueError unless ``high >= low >= 0``.  Pauses the protocol at
        once if the buffer is already above the new high mark.
        """
        self._set_write_buffer_limits(high=high, low=low)
        self._maybe_pause_protocol()
