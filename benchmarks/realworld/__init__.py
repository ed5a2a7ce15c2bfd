"""Part V's experiments: real programs on every loop, beside real services (services.py), each run
as ``python -m benchmarks.realworld.NAME``.  Importing the package imports nothing."""
