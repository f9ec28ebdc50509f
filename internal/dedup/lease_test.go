package dedup

import (
	"context"
	"testing"
	"time"
)

// TestLeaseSkipsLayerBeingProcessedElsewhere: a layer whose lease another
// node holds is skipped (busy), and processed once the lease is free.
func TestLeaseSkipsLayerBeingProcessedElsewhere(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{SharedStore: true})
	l := v.put(sharedLayers(t)[0].blob)
	name := "dedup:" + string(l)
	if ok, err := v.store.TryLease(ctx, name, "other-node", time.Minute); err != nil || !ok {
		t.Fatalf("taking the lease as another node: %v %v", ok, err)
	}
	ran := false
	run := func(ctx context.Context) (outcome, error) { ran = true; return v.eng.Process(ctx, l, ModeFull) }
	if out, err := v.eng.leased(ctx, l, run); err != nil || out != outBusy || ran {
		t.Fatalf("with another node's lease: %v, %v, ran %v; want busy without running", out, err, ran)
	}
	if err := v.store.ReleaseLease(ctx, name, "other-node"); err != nil {
		t.Fatal(err)
	}
	if out, err := v.eng.leased(ctx, l, run); err != nil || out != outDeduplicated || !ran {
		t.Fatalf("with the lease free: %v, %v, ran %v", out, err, ran)
	}
	// The engine gave its lease back.
	if ok, err := v.store.TryLease(ctx, name, "other-node", time.Minute); err != nil || !ok {
		t.Fatalf("lease not released after processing: %v %v", ok, err)
	}
}

// TestNoLeaseOnPrivateStore: with a store only this process opens (bolt), a
// lease left by a killed predecessor must not hold up its layers.
func TestNoLeaseOnPrivateStore(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	l := v.put(sharedLayers(t)[0].blob)
	if ok, err := v.store.TryLease(ctx, "dedup:"+string(l), "killed-predecessor", time.Minute); err != nil || !ok {
		t.Fatalf("taking the lease: %v %v", ok, err)
	}
	out, err := v.eng.leased(ctx, l, func(ctx context.Context) (outcome, error) { return v.eng.Process(ctx, l, ModeFull) })
	if err != nil || out != outDeduplicated {
		t.Fatalf("private store: %v, %v; want the layer processed", out, err)
	}
}
