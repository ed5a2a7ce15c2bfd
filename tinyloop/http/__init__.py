# tinyloop/http/__init__.py
"""The sans-I/O HTTP/1.1 layer every stage's server shares.

``HTTPConnection().receive_data(bytes) -> bytes`` is the whole interface a
server needs; :class:`RequestParser` and :func:`render` are the parts.
"""

from tinyloop.http.app import HELLO, hello_app
from tinyloop.http.connection import HTTPConnection
from tinyloop.http.parser import HTTPError, Limits, Request, RequestParser
from tinyloop.http.response import Response, http_date, render

__all__ = ["HELLO", "HTTPConnection", "HTTPError", "Limits", "Request", "RequestParser",
           "Response", "hello_app", "http_date", "render"]
