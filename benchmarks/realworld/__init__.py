"""Part V's experiments: real programs on every loop, with real services beside them.

:mod:`benchmarks.realworld.services` starts PostgreSQL and nginx from the
system packages (and stops them); each experiment is a module of its own,
run as ``python -m benchmarks.realworld.NAME``.  Light on purpose: importing
the package imports nothing.
"""
