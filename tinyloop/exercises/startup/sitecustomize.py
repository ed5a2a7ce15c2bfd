"""Python imports a module named sitecustomize at start-up, from the first
directory of sys.path that holds one (the site module's documentation).
The exercise checker puts this directory first on PYTHONPATH for its test
process and every server the tests start, so that each installs the guard
of tinyloop/exercises/guard.py before it runs a line of the student's code.
Outside a check the environment names no guard, and this does nothing.
"""

from tinyloop.exercises import guard

guard.install_from_environment()
