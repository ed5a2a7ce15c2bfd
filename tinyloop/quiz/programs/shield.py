"""shield(): the outer awaiter is cancelled; what happens to the inner task?"""
import asyncio


async def inner():
    await asyncio.sleep(0.1)
    print("inner finishes")


async def outer():
    try:
        await asyncio.shield(inner())
    except asyncio.CancelledError:
        print("outer cancelled")
        raise


async def main():
    task = asyncio.create_task(outer())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    print("main goes on")
    await asyncio.sleep(0.2)


if __name__ == "__main__":
    asyncio.run(main())
