package replicate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/proxy"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

func TestFilters(t *testing.T) {
	repos, err := NewRepoFilter([]string{"app/**", "lib/*"}, []string{"app/secret"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"app/web": true, "app/a/b": true, "app/secret": false, "lib/x": true, "lib/x/y": false, "other": false,
	} {
		if got := repos.Match(name); got != want {
			t.Errorf("repositories: Match(%q) = %v, want %v", name, got, want)
		}
	}
	tags, err := NewTagFilter(nil, []string{"tmp-*", "v?-rc"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"v1": true, "tmp-1": false, "v1-rc": false, "v10-rc": true, "latest": true} {
		if got := tags.Match(name); got != want {
			t.Errorf("tags: Match(%q) = %v, want %v", name, got, want)
		}
	}
	if repos.literal() {
		t.Error("patterns with wildcards taken for plain names")
	}
	if f, _ := NewRepoFilter([]string{"a/b", "c"}, nil); !f.literal() {
		t.Error("plain names not taken for plain names")
	}
	if _, err := NewRepoFilter([]string{"A/B"}, nil); err == nil {
		t.Error("an upper-case repository pattern was accepted")
	}
}

func TestBackoffDoublesUpToItsBound(t *testing.T) {
	tg := &target{Target: Target{Interval: 10 * time.Second}}
	var got []time.Duration
	for f := 1; f <= 6; f++ {
		got = append(got, tg.backoff(f))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff = %v, want %v", got, want)
		}
	}
	if d := (&target{}).backoff(100); d != retryMax {
		t.Errorf("without an interval the backoff ends at %v, want %v", d, retryMax)
	}
}

// TestRecordRoundTripAndPrune: the record is kept where layout says, read
// back as written, and pruned to what the source still holds.
func TestRecordRoundTripAndPrune(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	a, b := digest.FromString("a"), digest.FromString("b")
	rec, err := loadRecord(ctx, d, "dr", "app/web")
	if err != nil || len(rec.Tags) != 0 || len(rec.done) != 0 {
		t.Fatalf("a missing record: %+v, %v", rec, err)
	}
	rec.Tags["v1"], rec.Tags["old"] = a, b
	rec.done[a], rec.done[b] = true, true
	if err := rec.save(ctx, d, "dr", "app/web"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetContent(ctx, layout.ReplicationRecord("dr", "app/web")); err != nil {
		t.Fatalf("the record is not at its layout path: %v", err)
	}
	back, err := loadRecord(ctx, d, "dr", "app/web")
	if err != nil || back.Tags["v1"] != a || back.Tags["old"] != b || !back.done[a] || !back.done[b] {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if !back.prune(map[digest.Digest]bool{a: true}, []string{"v1"}) {
		t.Fatal("prune dropped nothing")
	}
	if len(back.Tags) != 1 || back.Tags["v1"] != a || len(back.done) != 1 || !back.done[a] {
		t.Fatalf("pruned to %+v", back)
	}
	if back.prune(map[digest.Digest]bool{a: true}, []string{"v1"}) {
		t.Fatal("a second prune dropped something")
	}
	// A torn record starts afresh rather than stopping replication.
	if err := d.PutContent(ctx, layout.ReplicationRecord("dr", "torn"), []byte(`{"tags":`)); err != nil {
		t.Fatal(err)
	}
	if rec, err := loadRecord(ctx, d, "dr", "torn"); err != nil || len(rec.Tags) != 0 {
		t.Fatalf("a torn record: %+v, %v", rec, err)
	}
}

// TestNotifyMarksOnlyManifestPushesOfSelectedRepositories: blob pushes,
// pulls, other repositories and targets without onpush are not woken.
func TestNotifyMarksOnlyManifestPushesOfSelectedRepositories(t *testing.T) {
	repos, _ := NewRepoFilter([]string{"app/**"}, nil)
	r, err := New(Options{Targets: []Target{
		{Name: "on", Direction: Push, OnPush: true, Repositories: repos, Remote: remote()},
		{Name: "off", Direction: Push, Repositories: repos, Remote: remote()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OnPush() {
		t.Fatal("OnPush is false with an onpush target")
	}
	push := func(repo, mt string) notify.Event {
		return notify.Event{Action: notify.ActionPush, Target: notify.Target{Repository: repo, MediaType: mt}}
	}
	r.Notify(push("app/web", "application/octet-stream"))
	r.Notify(push("other", "application/vnd.oci.image.manifest.v1+json"))
	r.Notify(notify.Event{Action: notify.ActionPull, Target: notify.Target{Repository: "app/web", MediaType: "application/vnd.oci.image.manifest.v1+json"}})
	if r.targets[0].hasDirty() {
		t.Fatalf("marked: %v", r.targets[0].takeDirty())
	}
	r.Notify(push("app/web", "application/vnd.oci.image.manifest.v1+json"))
	r.Notify(push("app/web", "application/vnd.oci.image.index.v1+json"))
	if got := r.targets[0].takeDirty(); len(got) != 1 || got[0] != "app/web" {
		t.Fatalf("marked %v, want [app/web]", got)
	}
	if r.targets[1].hasDirty() {
		t.Fatal("a target without onpush was marked")
	}
	select {
	case <-r.targets[0].wake:
	default:
		t.Fatal("the onpush target was not woken")
	}
}

func TestSummaryErr(t *testing.T) {
	var s Summary
	if s.Err() != nil {
		t.Fatal("an empty summary has an error")
	}
	for range maxErrors + 2 {
		s.fail(errors.New("x"))
	}
	if len(s.Errors) != maxErrors || s.Failed != maxErrors+2 || s.Err() == nil {
		t.Fatalf("summary %+v", s)
	}
}

func remote() proxy.Remote { return proxy.Remote{URL: "http://127.0.0.1:1"} }
