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
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
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
	port := flag.Int("port", 8000, "TCP port; 0 picks a free one")
	flag.Parse()
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinyloop: cannot listen:", err)
		os.Exit(1)
	}
	server := &http.Server{Handler: http.HandlerFunc(handle)}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Close() // closes the listener and every open connection
	}()
	fmt.Printf("tinyloop: serving go-nethttp on http://127.0.0.1:%d/\n", listener.Addr().(*net.TCPAddr).Port)
	if err := server.Serve(listener); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "tinyloop:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "tinyloop: go-nethttp: stopped")
}
