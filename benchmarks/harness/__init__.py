# benchmarks/harness/__init__.py
"""What every experiment under benchmarks/ repeats, written once: ``summary`` (the noise rule,
medians), ``machine``, ``output`` (where a run writes), ``process`` (servers, pinning, CPU),
``experiment`` (command line, repetitions, the fold, the JSON, the end of a run), ``render``
(tables), ``pyperf_runs``, ``callgrind``, ``profiling`` (cProfile by layer), ``strace`` (system
calls per request), ``layout`` (cores for Part V's services) and ``variants`` (the change -> cost
experiments' shared options).  benchmarks/README.md describes each."""
