// benchmarks/peers/go/main.go
//
// A peer for the benchmark table: Go's net/http serving the same answer as
// every tinyloop stage ("Hello, World!\n" for GET /, 404 elsewhere).  The
// standard library only, so it builds offline.  Goroutines on an epoll
// netpoller are Go's event loop; the harness runs it with GOMAXPROCS=1 so it
// is measured on one core like the others.
//
// Usage: go-nethttp [-port N]   (0 lets the kernel pick; default 8000)
// Prints "tinyloop: serving go-nethttp on http://127.0.0.1:PORT/" once it
// listens; SIGTERM or SIGINT closes the listener and every connection.
package main

import (
	"fmt"
	"net/http"
	"os"

	"tinyloop/benchmarks/peers/go/announce"
)

var hello = []byte("Hello, World!\n")

func handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(hello)
}

func main() {
	listener := announce.Listen()
	server := &http.Server{Handler: http.HandlerFunc(handle)}
	// Closing the server closes the listener and every open connection.
	announce.Serving("go-nethttp", listener, func() { server.Close() })
	if err := server.Serve(listener); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "tinyloop:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "tinyloop: go-nethttp: stopped")
}
