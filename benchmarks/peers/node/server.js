// benchmarks/peers/node/server.js
//
// A peer for the benchmark table: Node's http module serving the same answer
// as every tinyloop stage ("Hello, World!\n" for GET /, 404 elsewhere).
// Node runs JavaScript callbacks on libuv, the library uvloop wraps, so this
// row and uvloop's show one event loop under two languages.
//
// Usage: node server.js [--port N]   (0 lets the kernel pick; default 8000)
// Prints "tinyloop: serving node-http on http://127.0.0.1:PORT/" once it
// listens; SIGTERM or SIGINT closes the listener and every connection.
"use strict";

const http = require("http");

const HELLO = Buffer.from("Hello, World!\n");
const NOT_FOUND = Buffer.from("Not Found\n");

const args = process.argv.slice(2);
const portIndex = args.indexOf("--port");
const port = portIndex >= 0 ? Number(args[portIndex + 1]) : 8000;

const server = http.createServer((request, response) => {
  const found = request.url === "/";
  response.writeHead(found ? 200 : 404, {
    "Content-Type": "text/plain; charset=utf-8",
    "Content-Length": found ? HELLO.length : NOT_FOUND.length,
  });
  response.end(found ? HELLO : NOT_FOUND);
});

server.listen(port, "127.0.0.1", () => {
  console.log(`tinyloop: serving node-http on http://127.0.0.1:${server.address().port}/`);
});

function stop() {
  server.close(() => console.error("tinyloop: node-http: stopped"));
  server.closeAllConnections();
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
