"""The shared Part II behaviour suite, run on the callbacks reactor (tinyloop.callbacks.loop).

The adapter (``behaviour.adapters.Callbacks``): work is a plain callback; a
token is its Handle, or the socket for a reader.  The loop is the one the
``callbacks`` stage names in tinyloop/stages.py.
"""

from __future__ import annotations

from behaviour import LoopBehaviour
from behaviour.adapters import Callbacks


class TestCallbacksBehaviour(Callbacks, LoopBehaviour):
    pass
