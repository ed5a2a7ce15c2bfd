"""I/O against ready callbacks: a readable socket, and a callback queued before the wait."""
import asyncio
import socket


async def main():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.send(b"x")  # b is readable before the loop waits
    done = loop.create_future()

    def on_readable():
        print("reader")
        loop.remove_reader(b)
        done.set_result(None)

    loop.add_reader(b, on_readable)
    loop.call_soon(print, "call_soon")
    print("main waits")
    await done
    a.close()
    b.close()


if __name__ == "__main__":
    asyncio.run(main())
