// Package iowatch watches io streams: the bytes written through a Writer,
// for code that checks a stream's size alongside its digest, and the error
// a Reader's source returned, so that a decoder's failure can be told from
// the storage's (corrupt bytes, or a failed read worth a retry).
package iowatch

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

// ErrReader passes reads to R and keeps the last error R returned other
// than io.EOF in Err.
type ErrReader struct {
	R   io.Reader
	Err error
}

func (e *ErrReader) Read(p []byte) (int, error) {
	n, err := e.R.Read(p)
	if err != nil && err != io.EOF {
		e.Err = err
	}
	return n, err
}
