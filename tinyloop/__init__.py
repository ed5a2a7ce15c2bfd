"""tinyloop: an event loop built from ``select()`` up, read as a book beside its code.

Each subpackage is one stage of the book, named by concept:

* ``tinyloop.http``       the sans-I/O HTTP/1.1 layer every stage's server shares
* ``tinyloop.baseline``   Part 0: one client at a time; a thread per connection
* ``tinyloop.raw``        Part I: servers written straight on select, poll, epoll, kqueue
* ``tinyloop.callbacks``  Part II: a selectors-based reactor
* ``tinyloop.generators`` Part II: a generator-stack coroutine scheduler
* ``tinyloop.coroutines`` Part II: async/await with our own futures and tasks

``python -m tinyloop list`` prints the stages; ``python -m tinyloop serve STAGE``
starts one.  The core depends on the standard library alone.
"""

__version__ = "0.1.0"
