package config

import (
	"strings"
	"testing"
	"time"
)

func TestDedupKeys(t *testing.T) {
	c, warnings, err := Parse([]byte(`
storage:
  filesystem: {rootdirectory: /tmp/x}
  dedup:
    mode: full
    repositories: {"mirror/*": index, "ci/cache": "off"}
    workers: 3
    metadata: {path: /var/lib/cairn/meta.db}
    selective: {pulls: 5, window: 30m}
    cache:
      preconstruct: {dir: /var/cache/cairn, size: 10GiB}
      prefetch: {size: 512MiB}
    predictor: {enabled: false, repullratio: 0.25, rebuilds: 2}
`))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("parse: %v %v", err, warnings)
	}
	d := c.Storage.Dedup
	if d.Mode != "full" || d.Repositories["mirror/*"] != "index" || d.Repositories["ci/cache"] != "off" || d.Workers != 3 ||
		d.Metadata.Path != "/var/lib/cairn/meta.db" || d.Selective.Pulls != 5 || d.Selective.Window != 30*time.Minute ||
		d.Cache.Preconstruct.Dir != "/var/cache/cairn" || d.Predictor.Enabled || d.Predictor.RepullRatio != 0.25 ||
		d.Predictor.Rebuilds != 2 {
		t.Errorf("got %+v", d)
	}
	if n, _ := ParseBytes(d.Cache.Preconstruct.Size); n != 10<<30 {
		t.Errorf("preconstruct size %d", n)
	}
	if !d.Active() {
		t.Error("mode full is not active")
	}
	c, _, err = LoadWithEnv("", []string{"REGISTRY_STORAGE_DEDUP_MODE=index"})
	if err != nil || c.Storage.Dedup.Mode != "index" {
		t.Fatalf("env: %v %+v", err, c.Storage.Dedup)
	}
	if Default().Storage.Dedup.Active() {
		t.Error("dedup is on by default")
	}
}

func TestDedupInvalid(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"mode: sideways", "storage.dedup.mode"},
		{"repositories: {a/b: most}", "storage.dedup.repositories.a/b"},
		{"workers: -1", "storage.dedup.workers"},
		{"selective: {pulls: 0}", "storage.dedup.selective.pulls"},
		{"predictor: {repullratio: 2}", "storage.dedup.predictor.repullratio"},
		{"predictor: {rebuilds: -1}", "storage.dedup.predictor.rebuilds"},
		{"cache: {preconstruct: {size: lots}}", "storage.dedup.cache.preconstruct.size"},
		{"cache: {prefetch: {size: -5MiB}}", "storage.dedup.cache.prefetch.size"},
	} {
		_, _, err := Parse([]byte("storage:\n  filesystem: {rootdirectory: /tmp/x}\n  dedup:\n    " + tc.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.yaml, err, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512MiB": 512 << 20, "2GiB": 2 << 30, "3 GB": 3e9, "10KB": 1e4, "7B": 7} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1.5GiB", "-1", "GiB"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
}
