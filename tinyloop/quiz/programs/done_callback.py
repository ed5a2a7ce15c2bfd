"""A done callback against a task awaiting the same task: who hears first?"""
import asyncio


async def child():
    print("child returns")


async def main():
    task = asyncio.create_task(child())
    await asyncio.sleep(0)
    task.add_done_callback(lambda t: print("done callback"))
    await task
    print("main wakes")


if __name__ == "__main__":
    asyncio.run(main())
