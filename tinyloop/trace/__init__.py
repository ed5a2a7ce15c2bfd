"""Seeing the loop run: instrument hooks, a flight recorder, and its timeline.

``instrument.py`` defines the hooks every loop of Parts II-IV and Part
VI's ring calls (the protocol, modelled on ``trio.abc.Instrument``; ring
adds each SQE, io_uring_enter and CQE) and the set a loop keeps them in;
``recorder.py`` records them as a Chrome Trace Event file (``chrome.py``
writes and checks the format); ``timeline.py`` draws a trace as one HTML page;
``outside.py`` records what has no hooks: stdlib asyncio, uvloop, and Part
I's readiness servers.  Nothing here imports a loop: the commands that start
loops (``trace``, ``serve --stats``) live above them, in ``tinyloop/commands/``.
"""
