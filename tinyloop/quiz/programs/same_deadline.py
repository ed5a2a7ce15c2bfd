"""Five timers due at the same moment: in which order do they run?"""
import asyncio


async def main():
    loop = asyncio.get_running_loop()
    when = loop.time() + 0.01
    for name in ("first", "second", "third", "fourth", "fifth"):
        loop.call_at(when, print, name)
    await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(main())
