"""Part II, stage ``callbacks``: a reactor on :mod:`selectors`.

``loop.py`` is the reactor (ready queue, timer heap, readiness callbacks, the
named iteration ``run_once``); ``server.py`` serves HTTP on it in callback
style.  This file imports nothing, so an exercise file can replace either
module (see :mod:`tinyloop._override`).
"""
