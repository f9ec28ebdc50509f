// Command s3proxy runs the test tree's latency-adding, request-counting S3
// proxy on its own, so that any registry (cairn, or a peer built locally for
// a side-by-side run) can be pointed at the same slow object store:
//
//	go run ./test/internal/s3proxy/cmd/s3proxy -target http://127.0.0.1:9000 -delay 20ms
//
// It prints the proxy's URL, then on SIGUSR1 the requests counted since the
// last report (and starts counting anew), and on SIGINT or SIGTERM the last
// counts before it exits.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairn-registry/cairn/test/internal/s3proxy"
)

func main() {
	target := flag.String("target", "", "S3 endpoint to forward to (http://host:port)")
	delay := flag.Duration("delay", 0, "delay added before each request is forwarded")
	flag.Parse()
	p, err := s3proxy.Start(*target, *delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(p.URL)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGTERM)
	for s := range sig {
		c := p.Snapshot()
		p.Reset()
		fmt.Printf("%v; %d MiB up, %d MiB down\n", c, c.Up>>20, c.Down>>20)
		if s != syscall.SIGUSR1 {
			p.Close()
			return
		}
	}
}
