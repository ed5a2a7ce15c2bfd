"""tinyloop's benchmarks: every stage's server and a few peers, measured.

Each experiment runs from the repository's root as ``python -m benchmarks.NAME``
(``python -m benchmarks.run --help`` for the main one); :mod:`benchmarks.harness`
holds what they share, and :mod:`benchmarks.report` turns the main run's JSON
into tables and plots (the book imports it).  This file stays empty of
imports so that importing ``benchmarks.report`` costs nothing else.
"""
