"""A protocol's data_received against a callback queued just before the data arrives."""
import asyncio
import socket


class Echo(asyncio.Protocol):
    def __init__(self, done):
        self.done = done

    def data_received(self, data):
        print("data_received")
        self.done.set_result(None)


async def main():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    done = loop.create_future()
    transport, _ = await loop.connect_accepted_socket(lambda: Echo(done), b)
    a.send(b"ping")
    loop.call_soon(print, "call_soon")
    await done
    transport.close()
    a.close()


if __name__ == "__main__":
    asyncio.run(main())
