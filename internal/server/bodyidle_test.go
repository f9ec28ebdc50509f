package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// dialUpload connects to addr and sends the head of a monolithic upload
// of body, which the caller then writes to the connection it returns (closed
// when the test ends).
func dialUpload(t *testing.T, addr string, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sum := sha256.Sum256(body)
	fmt.Fprintf(conn, "POST /v2/a/blobs/uploads/?digest=sha256:%s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n",
		hex.EncodeToString(sum[:]), len(body))
	return conn
}

// TestBodyIdleTimeout: a request body that stops flowing ends the request
// after BodyIdleTimeout, while one that trickles steadily for longer than
// that completes. The margins are wide (pieces 20 times more often than the
// timeout, a stall given 20 times the timeout to end) so that a busy 2-core
// machine that pauses the server for a while does not fail the test.
func TestBodyIdleTimeout(t *testing.T) {
	const idle = 2 * time.Second
	srv := httptest.NewServer(New(registry.New(inmemory.New(), registry.Options{}), Options{BodyIdleTimeout: idle}))
	defer srv.Close()
	body := bytes.Repeat([]byte("cairn"), 200)

	t.Run("stalled body", func(t *testing.T) {
		conn := dialUpload(t, srv.Listener.Addr().String(), body)
		conn.Write(body[:10]) // then nothing more
		// Without the idle timeout the server would wait for the rest
		// for as long as the connection lives.
		conn.SetReadDeadline(time.Now().Add(20 * idle))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("a stalled upload got status %d", resp.StatusCode)
			}
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the server still waited for the body after %s", 20*idle)
		}
	})

	t.Run("trickling body", func(t *testing.T) {
		conn := dialUpload(t, srv.Listener.Addr().String(), body)
		// Thirty pieces, idle/20 apart: the whole body takes longer than
		// idle.
		const pieces = 30
		for i := range pieces {
			time.Sleep(idle / 20)
			if _, err := conn.Write(body[i*len(body)/pieces : (i+1)*len(body)/pieces]); err != nil {
				t.Fatalf("piece %d: %v", i, err)
			}
		}
		conn.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("a steadily trickling upload got status %d, want 201", resp.StatusCode)
		}
	})
}
