"""Cancelling a task before its first step: does its body run at all?"""
import asyncio


async def child():
    try:
        print("child body")
    finally:
        print("child finally")


async def main():
    task = asyncio.create_task(child())
    task.cancel()
    print("cancelled")
    try:
        await task
    except asyncio.CancelledError:
        print("main sees CancelledError")


if __name__ == "__main__":
    asyncio.run(main())
