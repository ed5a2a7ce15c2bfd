"""Seeing the loop run: instrument hooks, a flight recorder, and its timeline.

``instrument.py`` defines the hooks every loop of Parts II-IV calls (the
protocol, modelled on ``trio.abc.Instrument``) and the set a loop keeps them
in; ``recorder.py`` records them as a Chrome Trace Event file (``chrome.py``
writes and checks the format); ``timeline.py`` draws a trace as one HTML page
with an inline SVG; ``outside.py`` records stdlib asyncio and uvloop, which
have no hooks; ``stats.py`` is the live panel of ``serve --stats``;
``command.py`` is ``python -m tinyloop trace``.
"""
