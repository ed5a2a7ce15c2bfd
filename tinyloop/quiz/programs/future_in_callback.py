"""A future resolved inside a callback: when does the task that awaits it wake?"""
import asyncio


async def main():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def resolve():
        fut.set_result("done")
        print("resolved")

    loop.call_soon(resolve)
    loop.call_soon(print, "queued after resolve")
    print(await fut)


if __name__ == "__main__":
    asyncio.run(main())
