"""Cancelling a sleeping task: where does the CancelledError land, and when?"""
import asyncio


async def sleeper():
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        print("sleeper sees CancelledError")
        raise


async def main():
    task = asyncio.create_task(sleeper())
    await asyncio.sleep(0)
    task.cancel()
    print("cancel() returned")
    try:
        await task
    except asyncio.CancelledError:
        print("main sees CancelledError")


if __name__ == "__main__":
    asyncio.run(main())
