"""call_soon against call_later(0): a timer due now, and a callback queued after it."""
import asyncio


async def main():
    loop = asyncio.get_running_loop()
    loop.call_later(0, print, "call_later(0)")
    loop.call_soon(print, "call_soon")
    print("main goes on")
    await asyncio.sleep(0.01)


if __name__ == "__main__":
    asyncio.run(main())
