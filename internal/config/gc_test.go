package config

import (
	"strings"
	"testing"
	"time"
)

func TestGCDefaults(t *testing.T) {
	g := Default().Storage.GC
	want := GC{Interval: 24 * time.Hour, Delay: time.Hour, BatchSize: 1000, Concurrency: 8}
	if g != want {
		t.Errorf("defaults %+v, want %+v", g, want)
	}
}

func TestGCKeys(t *testing.T) {
	c, warnings, err := Parse([]byte(`
storage:
  filesystem:
    rootdirectory: /tmp/x
  gc:
    enabled: true
    interval: 6h
    delay: 0s
    deleteuntagged: true
    batchsize: 500
    concurrency: 4
`))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("parse: %v %v", err, warnings)
	}
	want := GC{Enabled: true, Interval: 6 * time.Hour, Delay: 0, DeleteUntagged: true, BatchSize: 500, Concurrency: 4}
	if c.Storage.GC != want {
		t.Errorf("got %+v, want %+v", c.Storage.GC, want)
	}
	c, _, err = LoadWithEnv("", []string{"REGISTRY_STORAGE_GC_ENABLED=true", "REGISTRY_STORAGE_GC_DELAY=30m"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Storage.GC.Enabled || c.Storage.GC.Delay != 30*time.Minute || c.Storage.GC.Interval != 24*time.Hour {
		t.Errorf("from the environment: %+v", c.Storage.GC)
	}
}

func TestGCInvalid(t *testing.T) {
	for doc, want := range map[string]string{
		"interval: 0s":    "storage.gc.interval",
		"delay: -1h":      "storage.gc.delay",
		"batchsize: 0":    "storage.gc.batchsize",
		"concurrency: 0":  "storage.gc.concurrency",
		"interval: 5":     "storage.gc.interval",
		"enabled: sure":   "storage.gc.enabled",
		"batchsize: many": "storage.gc.batchsize",
	} {
		_, _, err := Parse([]byte("storage:\n  gc:\n    " + doc + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %s", doc, err, want)
		}
	}
}
