"""Predict the order: short asyncio programs whose printed lines the reader puts in order.

``python -m tinyloop quiz --list`` names them, ``python -m tinyloop quiz
NAME`` asks, runs the program on asyncio, uvloop, tinyloop.aio and
tinyloop.uv, and grades the answer (tinyloop/quiz/cli.py).  The programs are
the files in tinyloop/quiz/programs/ (data, not modules: each a plain asyncio
program, shown to the reader whole and run by path); what each prints on
each loop, and why, is in tinyloop/quiz/catalog.py.
"""
