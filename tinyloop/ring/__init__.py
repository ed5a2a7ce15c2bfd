"""Part VI: tinyloop.ring, an asyncio event loop on io_uring: a proactor, not a reactor.

Installed the way uvloop is::

    import tinyloop.ring
    tinyloop.ring.run(main())        # or asyncio.Runner(loop_factory=tinyloop.ring.new_event_loop)

The names are loaded on first use (PEP 562), so ``import tinyloop.ring``
costs nothing until a loop is made; where io_uring is missing or refused,
using any of them raises an ImportError that says why in one line
(tinyloop.raw.uring.unavailable).
"""

__all__ = ["EventLoopPolicy", "Loop", "new_event_loop", "run"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from tinyloop.ring import loop
        reason = loop.refusal()
        if reason is not None:  # what a loop factory's users (asyncio.Runner, the tests) expect
            raise ImportError(reason)
        return getattr(loop, name)
    raise AttributeError(f"module 'tinyloop.ring' has no attribute {name!r}")
