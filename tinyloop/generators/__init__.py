"""Part II, generators: a coroutine scheduler built from plain generators.

``traps`` holds the requests a coroutine yields to the scheduler;
``scheduler`` runs tasks as stacks of generators (the trampoline);
``yieldfrom`` is the same scheduler when ``yield from`` keeps the stack;
``server`` and ``yieldfrom_server`` serve HTTP on each.
"""
