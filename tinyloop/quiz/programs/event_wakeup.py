"""asyncio.Event: three waiters, one set(); who wakes, in which order?"""
import asyncio


async def waiter(event, name):
    await event.wait()
    print(f"{name} wakes")


async def main():
    event = asyncio.Event()
    tasks = [asyncio.create_task(waiter(event, name)) for name in "CAB"]
    await asyncio.sleep(0)
    event.set()
    print("set() returned")
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
