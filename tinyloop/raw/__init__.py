"""Part I, readiness: servers written straight on select(2), poll(2), epoll(7) and kqueue(2).

Each server module is one loop over one system call; what a connection does
when its socket is ready lives once, in :mod:`tinyloop.raw.connection`.
(No imports here: see ``tinyloop/_override.py`` for why a stage package stays empty.)
"""
