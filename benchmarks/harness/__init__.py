# benchmarks/harness/__init__.py
"""What every experiment under benchmarks/ repeats, written once.

    summary   one noise rule (NOISE) and one way to summarise repetitions:
              the median, with the spread (min–max)
    machine   the machine's fingerprint, tool versions, a command as a reader types it
    output    one output rule: a run writes under benchmarks/results/local/;
              only ``--reference`` writes the book's committed reference
    process   launching a server and waiting until it answers, pinning server
              and load generator to their cores (at real-time priority where
              allowed), the server's CPU from the process's own accounting
    experiment  the shared command line, interleaved repetitions, the one fold
              of records into medians, spreads, noise and ratios, the JSON's
              head, writing it and printing the one-line conclusion
    render    one renderer: (header, rows) as aligned text or Markdown, and
              the caption line saying where the numbers were measured

An experiment (``python -m benchmarks.run``, ``.echo``, ``.workers``, ...)
declares its servers, loads and variants and imports these; none imports
another experiment's private names.
"""
