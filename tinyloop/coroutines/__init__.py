"""Part II, stage ``coroutines``: ``async``/``await`` on our own Future and Task.

``futures.py`` is the Future (a result that will be set later, and what
``await`` waits on), ``tasks.py`` the Task that steps a coroutine on the
callbacks reactor plus ``sleep``, ``gather``, ``wait_for`` and ``run``;
``streams.py`` reads and writes sockets with ``await``; ``server.py`` serves
HTTP on those streams.  This file imports nothing, so an exercise file can
replace any of those modules (see :mod:`tinyloop._override`).
"""
