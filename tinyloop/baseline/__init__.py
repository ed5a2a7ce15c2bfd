"""Part 0, the baselines: servers written with blocking calls.

``blocking`` serves one client at a time; ``threaded`` gives each connection
a thread.  Every later stage is measured against these two.  (No imports
here: see ``tinyloop/_override.py`` for why a stage package stays empty.)
"""
