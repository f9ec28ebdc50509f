package azure_test

import (
	"context"
	"testing"
	"time"
)

func TestScratchTiming(t *testing.T) {
	s := needServer(t)
	for _, mode := range []string{"true", "false"} {
		name, _ := newContainer(t, s)
		p := params(s, name)
		p.BatchDelete = mode
		d := newDriver(t, p)
		t0 := time.Now()
		paths := putFiles(t, d, "/x", 2100)
		t1 := time.Now()
		n, err := d.DeleteFiles(context.Background(), paths)
		t2 := time.Now()
		c := countFiles(t, d, "/")
		t.Logf("mode %s: put %v, delete %v (%d, %v), walk %v (%d)", mode, t1.Sub(t0), t2.Sub(t1), n, err, time.Since(t2), c)
	}
}
