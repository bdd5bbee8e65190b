// Package iocount counts the bytes that pass through a writer.
package iocount

import "io"

// Writer passes writes to W and counts in N the bytes W took.
type Writer struct {
	W io.Writer
	N int64
}

func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
