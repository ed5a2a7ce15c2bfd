"""tinyloop's benchmarks: every stage's server and a few peers, measured.  Each experiment runs from
the repository's root as ``python -m benchmarks.NAME``; benchmarks/README.md lists them.  No imports
here, so that importing ``benchmarks.report`` (the book does) costs nothing else."""
