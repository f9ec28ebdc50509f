// Package iocount counts the bytes written through an io.Writer, for code
// that checks a stream's size alongside its digest.
package iocount

import "io"

// Writer passes writes to W and adds the bytes written to N.
type Writer struct {
	W io.Writer
	N int64
}

func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
