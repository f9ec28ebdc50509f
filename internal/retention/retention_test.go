package retention

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

func TestKeepTags(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ago := func(h int) time.Time { return now.Add(-time.Duration(h) * time.Hour) }
	tags := []tagInfo{
		{name: "v1.0", pushed: ago(500)},
		{name: "v1.1", pushed: ago(400), pulled: ago(2)},
		{name: "v2.0", pushed: ago(300)},
		{name: "latest", pushed: ago(1)},
		{name: "pr-1", pushed: ago(200), pulled: ago(100)},
		{name: "pr-2", pushed: ago(50)},
		{name: "pr-3", pushed: ago(30), pulled: ago(20)},
	}
	rule := func(k KeepRule) compiledRule {
		p, err := New(nil, Options{Policies: []Policy{{Repositories: []string{"**"}, KeepTags: []KeepRule{k}}}})
		if err != nil {
			t.Fatal(err)
		}
		return p.policies[0].keep[0]
	}
	for _, c := range []struct {
		name  string
		rules []compiledRule
		delay time.Duration
		want  []string
	}{
		{"no rules keep all", nil, 0, []string{"latest", "pr-1", "pr-2", "pr-3", "v1.0", "v1.1", "v2.0"}},
		{"patterns alone", []compiledRule{rule(KeepRule{Patterns: []string{`v\d+\.\d+`, "latest"}})}, 0, []string{"latest", "v1.0", "v1.1", "v2.0"}},
		{"pattern is the whole tag", []compiledRule{rule(KeepRule{Patterns: []string{"v1"}})}, 0, nil},
		{"most recently pushed", []compiledRule{rule(KeepRule{MostRecentlyPushedCount: 2})}, 0, []string{"latest", "pr-3"}},
		{"pushed within", []compiledRule{rule(KeepRule{PushedWithin: 60 * time.Hour})}, 0, []string{"latest", "pr-2", "pr-3"}},
		{"pulled within", []compiledRule{rule(KeepRule{PulledWithin: 24 * time.Hour})}, 0, []string{"pr-3", "v1.1"}},
		{"most recently pulled", []compiledRule{rule(KeepRule{MostRecentlyPulledCount: 1})}, 0, []string{"v1.1"}},
		{"criteria among the pattern's tags", []compiledRule{rule(KeepRule{Patterns: []string{"pr-.*"}, MostRecentlyPushedCount: 1, PulledWithin: 150 * time.Hour})}, 0, []string{"pr-1", "pr-3"}},
		{"any rule keeps", []compiledRule{rule(KeepRule{Patterns: []string{"v2.*"}}), rule(KeepRule{Patterns: []string{"pr-.*"}, MostRecentlyPushedCount: 1})}, 0, []string{"pr-3", "v2.0"}},
		{"delay keeps young tags", []compiledRule{rule(KeepRule{Patterns: []string{"v2.*"}})}, 40 * time.Hour, []string{"latest", "pr-3", "v2.0"}},
	} {
		got := slices.Sorted(maps.Keys(keepTags(tags, c.rules, now, c.delay)))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: kept %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for name, p := range map[string]Policy{
		"no repositories": {},
		"bad tag pattern": {Repositories: []string{"**"}, KeepTags: []KeepRule{{Patterns: []string{"("}}}},
		"negative count":  {Repositories: []string{"**"}, KeepTags: []KeepRule{{MostRecentlyPushedCount: -1}}},
		"empty pattern":   {Repositories: []string{""}},
	} {
		if _, err := New(nil, Options{Policies: []Policy{p}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPullsFlush: pulls reach storage at a flush, merged with what other
// nodes wrote (the later time wins).
func TestPullsFlush(t *testing.T) {
	ctx := t.Context()
	d := inmemory.New()
	a, b := NewPulls(d), NewPulls(d)
	a.Pulled("r", "old")
	a.Pulled("r", "both")
	time.Sleep(time.Millisecond)
	b.Pulled("r", "both")
	b.Pulled("r", "b-only")
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPulls(ctx, d, "r")
	if err != nil || len(got) != 3 {
		t.Fatalf("pulls %v, %v", got, err)
	}
	if !got["both"].After(got["old"]) {
		t.Errorf("an earlier pull overwrote a later one: %v", got)
	}
	if got, err := ReadPulls(ctx, d, "none"); err != nil || len(got) != 0 {
		t.Errorf("pulls of a repository never pulled: %v, %v", got, err)
	}
}
