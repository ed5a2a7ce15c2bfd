"""sleep(0): two tasks that each give the loop back once."""
import asyncio


async def worker(name):
    print(f"{name} 1")
    await asyncio.sleep(0)
    print(f"{name} 2")


async def main():
    await asyncio.gather(worker("A"), worker("B"))


if __name__ == "__main__":
    asyncio.run(main())
