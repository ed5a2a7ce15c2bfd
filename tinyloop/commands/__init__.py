"""The commands that start loops: ``trace`` and ``serve --stats``.

They sit beside ``tinyloop/cli.py``, above the loops they run: each imports
a stage's server and ``tinyloop.trace``'s recorder, and nothing below
imports them.  ``trace.py`` records a stage or a script; ``load.py`` is the
load it sends a stage, from a process of its own; ``stats.py`` is the live
panel of ``serve --stats``.
"""
