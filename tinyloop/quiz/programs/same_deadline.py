"""Five timers due at the same moment: in which order do they run?"""
import asyncio
import math


async def main():
    loop = asyncio.get_running_loop()
    # On a whole millisecond: uvloop counts time in whole milliseconds, and
    # rounds each timer's delay from "now", which moves between the calls.
    when = math.ceil((loop.time() + 0.01) * 1000) / 1000
    for name in ("first", "second", "third", "fourth", "fifth"):
        loop.call_at(when, print, name)
    await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(main())
