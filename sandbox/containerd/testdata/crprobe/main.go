// Command crprobe is the checkpoint tests' workload in a sandbox whose
// image has no python: `crprobe serve ADDR` answers every HTTP request
// with 200 and "crprobe <pid>"; `crprobe hold MIB` fills MiB of memory with
// a pattern and prints its sum once a second, so a restore that lost a
// page shows another sum; `crprobe unix PATH` listens on a unix socket at
// PATH (in /workspace: a host path, which gVisor cannot checkpoint).
// Built static by the test (CGO_ENABLED=0).
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crprobe serve ADDR | crprobe hold MIB | crprobe unix PATH")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		pid := os.Getpid()
		err := http.ListenAndServe(os.Args[2], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "crprobe %d\n", pid)
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case "unix":
		l, err := net.Listen("unix", os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			c.Close()
		}
	case "hold":
		n, err := strconv.Atoi(os.Args[2])
		if err != nil || n <= 0 {
			fmt.Fprintln(os.Stderr, "hold: want a number of MiB")
			os.Exit(2)
		}
		b := make([]byte, n<<20)
		for i := range b {
			b[i] = byte(i*7 + i>>12)
		}
		for {
			var sum uint64
			for i := 0; i < len(b); i += 512 {
				sum += uint64(b[i])
			}
			fmt.Printf("held %d MiB sum %d\n", n, sum)
			time.Sleep(time.Second)
		}
	}
	os.Exit(2)
}
