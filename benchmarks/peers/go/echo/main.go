// benchmarks/peers/go/echo/main.go
//
// A peer for the echo benchmark (benchmarks/echo.py): a TCP echo server in
// Go, a goroutine per connection doing blocking-looking Read and Write on
// Go's epoll netpoller.  The standard library only, so it builds offline.
// The harness runs it with GOMAXPROCS=1 so it is measured on one core like
// the others.  Backpressure comes free: a goroutine blocked in Write reads
// nothing more from its connection.
//
// Usage: echo [-port N]   (0 lets the kernel pick; default 8000)
// Prints "tinyloop: serving echo-go on http://127.0.0.1:PORT/" once it
// listens (the launcher's announce line, shared with the HTTP servers);
// SIGTERM or SIGINT closes the listener and every connection.
package main

import (
	"fmt"
	"net"
	"os"
	"sync"

	"tinyloop/benchmarks/peers/go/announce"
)

func echo(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, 65536)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF: the client is done
		}
	}
}

func main() {
	listener := announce.Listen()
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	announce.Serving("echo-go", listener, func() {
		listener.Close()
		mu.Lock()
		for conn := range open {
			conn.Close()
		}
		mu.Unlock()
	})
	for {
		conn, err := listener.Accept()
		if err != nil {
			break // the listener was closed: stop
		}
		mu.Lock()
		open[conn] = struct{}{}
		mu.Unlock()
		go func() {
			echo(conn)
			mu.Lock()
			delete(open, conn)
			mu.Unlock()
		}()
	}
	fmt.Fprintln(os.Stderr, "tinyloop: echo-go: stopped")
}
