package layer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"
)

// memStore is an in-memory FileStore that counts stores.
type memStore struct {
	mu    sync.Mutex
	files map[digest.Digest][]byte
	puts  int
	// whole makes Open hand out payloads as a Whole, as a pack store
	// hands out the small files it decompressed.
	whole bool
}

// wholePayload is a Whole over a payload's bytes.
type wholePayload struct {
	*bytes.Reader
	b []byte
}

func (w wholePayload) Bytes() []byte { return w.b }
func (wholePayload) Close() error    { return nil }

func newMemStore() *memStore { return &memStore{files: make(map[digest.Digest][]byte)} }

func (m *memStore) Has(_ context.Context, d digest.Digest) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.files[d]
	return ok, nil
}

func (m *memStore) Put(_ context.Context, d digest.Digest, size int64, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(b)) != size || digest.FromBytes(b) != d {
		return fmt.Errorf("memStore: put %s: got %d bytes hashing to %s", d, len(b), digest.FromBytes(b))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[d]; !ok {
		m.files[d] = b
		m.puts++
	}
	return nil
}

func (m *memStore) Open(_ context.Context, d digest.Digest) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.files[d]
	if !ok {
		return nil, fmt.Errorf("memStore: %s not found", d)
	}
	if m.whole {
		return wholePayload{bytes.NewReader(b), b}, nil
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}
