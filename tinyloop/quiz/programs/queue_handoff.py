"""A full Queue(maxsize=1): the producer waits, the consumer takes; in which order?"""
import asyncio


async def producer(queue):
    for item in (1, 2):
        await queue.put(item)
        print(f"put {item}")


async def consumer(queue):
    for _ in (1, 2):
        print(f"got {await queue.get()}")


async def main():
    queue = asyncio.Queue(maxsize=1)
    await asyncio.gather(producer(queue), consumer(queue))


if __name__ == "__main__":
    asyncio.run(main())
