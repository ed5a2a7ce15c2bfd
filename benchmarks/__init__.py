"""tinyloop's benchmark harness: every stage's server and a few peers under ab and wrk.

``python benchmarks/run.py --help`` runs it; :mod:`benchmarks.report` turns
the JSON it writes into tables and plots (the book imports that module).
This file stays empty of imports so that importing ``benchmarks.report``
costs nothing else.
"""
