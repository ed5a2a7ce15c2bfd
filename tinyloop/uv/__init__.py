"""Part IV: tinyloop.uv, the asyncio loop of Part III with its hot paths in Cython on libuv.

Installed the way uvloop is::

    import tinyloop.uv
    tinyloop.uv.run(main())          # or asyncio.Runner(loop_factory=tinyloop.uv.new_event_loop)

The names are loaded on first use (PEP 562), so ``import tinyloop.uv``
costs nothing until a loop is made; if the extension was not built, using
any of them raises an ImportError that says what to install.
"""

__all__ = ["EventLoopPolicy", "Loop", "new_event_loop", "run"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from tinyloop.uv import loop
        return getattr(loop, name)
    raise AttributeError(f"module 'tinyloop.uv' has no attribute {name!r}")
