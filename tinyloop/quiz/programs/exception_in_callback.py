"""A callback that raises: what happens to the callbacks queued after it?"""
import asyncio


async def main():
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda loop, context: print("handler:", context["exception"]))

    def broken():
        print("broken runs")
        raise ValueError("oops")

    loop.call_soon(broken)
    loop.call_soon(print, "next callback")
    await asyncio.sleep(0.01)


if __name__ == "__main__":
    asyncio.run(main())
