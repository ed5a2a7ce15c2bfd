"""A task's first step: when does the body of a new task start?"""
import asyncio


async def child():
    print("child starts")


async def main():
    task = asyncio.create_task(child())
    print("task created")
    await task
    print("child awaited")


if __name__ == "__main__":
    asyncio.run(main())
