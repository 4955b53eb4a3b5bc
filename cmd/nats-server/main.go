// Command nats-server is the stock NATS server built from the nats-server
// module ckfrelay already depends on, so the offline images (FROM scratch,
// no registry) carry the same server version the tests embed. It takes the
// upstream server's flags and configuration files (e.g. -c nats.conf).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("nats-server", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: nats-server [-c config] [upstream nats-server flags]\n")
	}
	opts, err := server.ConfigureOptions(fs, args,
		func() { fmt.Println("nats-server", server.VERSION); os.Exit(0) },
		func() { fs.Usage(); os.Exit(0) },
		func() { fmt.Println("see https://docs.nats.io for TLS options"); os.Exit(0) })
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats-server: %v\n", err)
		return 2
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats-server: %v\n", err)
		return 1
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		fmt.Fprintf(os.Stderr, "nats-server: %v\n", err)
		return 1
	}
	s.WaitForShutdown()
	return 0
}
