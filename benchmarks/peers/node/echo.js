// benchmarks/peers/node/echo.js
//
// A peer for the echo benchmark (benchmarks/echo.py): a TCP echo server on
// Node's net module, JavaScript callbacks on libuv (the library uvloop
// wraps).  socket.pipe(socket) writes back every chunk that arrives and
// pauses reading while the socket's write buffer is above its high-water
// mark: the same backpressure as the Python peers' pause_writing.
//
// Usage: node echo.js [--port N]   (0 lets the kernel pick; default 8000)
// Prints "tinyloop: serving echo-node on http://127.0.0.1:PORT/" once it
// listens (the launcher's announce line, shared with the HTTP servers);
// SIGTERM or SIGINT closes the listener and every connection.
"use strict";

const net = require("net");

const args = process.argv.slice(2);
const portIndex = args.indexOf("--port");
const port = portIndex >= 0 ? Number(args[portIndex + 1]) : 8000;

const open = new Set();
const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  open.add(socket);
  socket.on("close", () => open.delete(socket));
  socket.on("error", () => {}); // a reset peer: "close" follows
  socket.pipe(socket);
});

server.listen(port, "127.0.0.1", () => {
  console.log(`tinyloop: serving echo-node on http://127.0.0.1:${server.address().port}/`);
});

function stop() {
  server.close(() => console.error("tinyloop: echo-node: stopped"));
  for (const socket of open) socket.destroy();
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
