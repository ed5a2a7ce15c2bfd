"""A callback queued while the ready queue runs, and a timer that falls due meanwhile."""
import asyncio


async def main():
    loop = asyncio.get_running_loop()

    def first():
        print("first")
        loop.call_soon(print, "queued by first")

    loop.call_later(0, print, "timer")
    loop.call_soon(first)
    loop.call_soon(print, "second")
    await asyncio.sleep(0.01)


if __name__ == "__main__":
    asyncio.run(main())
