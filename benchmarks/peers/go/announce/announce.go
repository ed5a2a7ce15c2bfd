// benchmarks/peers/go/announce/announce.go
//
// What every Go peer does around its own serving, written once: the -port
// flag, the listener on 127.0.0.1, the announce line the harness waits for
// ("tinyloop: serving NAME on http://127.0.0.1:PORT/", shared with every
// other server), and a stop function run on SIGTERM or SIGINT.
package announce

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// Listen parses -port (0 picks a free one; default 8000) and listens on
// 127.0.0.1 there, or exits with status 1 and a message.
func Listen() net.Listener {
	port := flag.Int("port", 8000, "TCP port; 0 picks a free one")
	flag.Parse()
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinyloop: cannot listen:", err)
		os.Exit(1)
	}
	return listener
}

// Serving prints the announce line for name, then calls stop (in a
// goroutine) once SIGTERM or SIGINT arrives.
func Serving(name string, listener net.Listener, stop func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stop()
	}()
	fmt.Printf("tinyloop: serving %s on http://127.0.0.1:%d/\n", name, listener.Addr().(*net.TCPAddr).Port)
}
