"""The sans-I/O HTTP/1.1 layer every stage's server shares.

``HTTPConnection().receive_data(bytes) -> bytes`` is the whole interface a
server needs; :class:`RequestParser` and :func:`render` are the parts.
"""

from .app import HELLO, hello_app
from .connection import HTTPConnection
from .parser import HTTPError, Limits, Request, RequestParser
from .response import Response, render

__all__ = ["HELLO", "HTTPConnection", "HTTPError", "Limits", "Request", "RequestParser",
           "Response", "hello_app", "render"]
