// Command connect tries to connect to a unix socket and says what happened:
// the Docker tests run it in a sandbox as the sandbox user, to prove that a
// command cannot drive the agent. (testdata: not part of the module's build.)
package main

import (
	"fmt"
	"net"
	"os"
)

func main() {
	c, err := net.Dial("unix", os.Args[1])
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	c.Close()
	fmt.Println("connected")
}
