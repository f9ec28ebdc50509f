package testsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// testPutContentWhileDeleting: PutContent into a directory that Delete
// removes at the same time (a tag PUT racing a manifest DELETE) never
// fails, and neither does the Delete; afterwards the file is there in full
// or not at all.
func testPutContentWhileDeleting(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	const rounds = 30
	dir := base + "/tags/t"
	content := bytes.Repeat([]byte("cairn"), 100)
	for i := range rounds {
		p := fmt.Sprintf("%s/index/%d/link", dir, i%3)
		put(t, d, p, content)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := d.PutContent(ctx, dir+"/current/link", content); err != nil {
				t.Errorf("round %d: PutContent: %v", i, err)
			}
		})
		wg.Go(func() {
			if err := d.Delete(ctx, dir); err != nil && !errors.Is(err, driver.ErrNotFound) {
				t.Errorf("round %d: Delete: %v", i, err)
			}
		})
		wg.Wait()
		b, err := d.GetContent(ctx, dir+"/current/link")
		if err == nil && !bytes.Equal(b, content) {
			t.Errorf("round %d: a torn file: %d bytes", i, len(b))
		}
		if err != nil && !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("round %d: GetContent: %v", i, err)
		}
	}
}
