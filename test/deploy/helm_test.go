package deploy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cairn-registry/cairn/internal/testutil/clitool"
)

// TestHelmChart lints the chart and renders it with its defaults: one
// replica on a PersistentVolumeClaim, probes on the debug listener that
// the rendered configuration opens, and a configuration that cairn loads
// and serves with both probes answering 200.
func TestHelmChart(t *testing.T) {
	helm := clitool.Path(t, "helm")
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "cairn")
	out := run(t, "", nil, helm, "lint", "--strict", chart)
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint --strict:\n%s", out)
	}

	docs := render(t, helm, chart)
	dep := one(t, docs, "Deployment")
	c := dig(dep, "spec", "template", "spec", "containers", 0)
	if img := dig(c, "image"); img != "registry.example.com/cairn:latest" {
		t.Errorf("image %v, want registry.example.com/cairn:latest", img)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := dig(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
		if got := dig(c, probe, "httpGet", "port"); got != "debug" {
			t.Errorf("%s port %v, want the debug port", probe, got)
		}
	}
	cfgPath, cfg := renderedConfig(t, docs)
	if port := containerPort(c, "debug"); !strings.HasSuffix(fmt.Sprint(dig(cfg, "http", "debug", "addr")), fmt.Sprintf(":%d", port)) {
		t.Errorf("the probes' port %d is not the configuration's http.debug.addr %v", port, dig(cfg, "http", "debug", "addr"))
	}
	if port := containerPort(c, "http"); !strings.HasSuffix(fmt.Sprint(dig(cfg, "http", "addr")), fmt.Sprintf(":%d", port)) {
		t.Errorf("the container's http port %d is not the configuration's http.addr %v", port, dig(cfg, "http", "addr"))
	}
	if got := dig(dep, "spec", "strategy", "type"); got != "Recreate" {
		t.Errorf("strategy %v, want Recreate (one process holds the volume)", got)
	}
	pvc := one(t, docs, "PersistentVolumeClaim")
	if claim := dig(volume(t, dep, "data"), "persistentVolumeClaim", "claimName"); claim != dig(pvc, "metadata", "name") {
		t.Errorf("the data volume claims %v; the chart's claim is %v", claim, dig(pvc, "metadata", "name"))
	}
	if n := len(kinds(docs, "ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitors by default, want none", n)
	}
	if out := configCheck(t, cfgPath); !strings.Contains(out, "rootdirectory: /var/lib/cairn") {
		t.Errorf("cairn config check of the rendered configuration:\n%s\nwant the storage on the volume, /var/lib/cairn", out)
	}
	serveProbes(t, cfgPath)
}

// TestHelmChartS3 renders the stateless form: an S3 bucket, Redis, several
// replicas, dedup, a ServiceMonitor, credentials from Secrets, and a key
// given under config.
func TestHelmChartS3(t *testing.T) {
	helm := clitool.Path(t, "helm")
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "cairn")
	docs := render(t, helm, chart, "--set", strings.Join([]string{
		"storage.type=s3", "storage.s3.bucket=registry", "storage.s3.regionendpoint=http://minio:9000",
		"storage.s3.forcepathstyle=true", "storage.s3.existingSecret=s3creds",
		"redis.addr=redis:6379", "redis.existingSecret=redispw", "replicaCount=3", "dedup.mode=full",
		"metrics.serviceMonitor.enabled=true", "config.log.level=warn",
		"image.digest=sha256:" + strings.Repeat("ab", 32),
	}, ","))
	dep := one(t, docs, "Deployment")
	c := dig(dep, "spec", "template", "spec", "containers", 0)
	if img := dig(c, "image"); img != "registry.example.com/cairn@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %v, want the digest", img)
	}
	if got := dig(dep, "spec", "replicas"); got != 3 {
		t.Errorf("replicas %v, want 3", got)
	}
	if got := dig(dep, "spec", "strategy", "type"); got != "RollingUpdate" {
		t.Errorf("strategy %v, want RollingUpdate", got)
	}
	if n := len(kinds(docs, "PersistentVolumeClaim")); n != 0 {
		t.Errorf("%d PersistentVolumeClaims with S3, want none", n)
	}
	if dig(volume(t, dep, "data"), "emptyDir") == nil {
		t.Errorf("the data volume is not an emptyDir with S3")
	}
	env := map[string]any{}
	for _, e := range asList(dig(c, "env")) {
		env[fmt.Sprint(dig(e, "name"))] = dig(e, "valueFrom", "secretKeyRef", "name")
	}
	for k, want := range map[string]string{"REGISTRY_STORAGE_S3_ACCESSKEY": "s3creds", "REGISTRY_STORAGE_S3_SECRETKEY": "s3creds", "REGISTRY_REDIS_PASSWORD": "redispw"} {
		if env[k] != want {
			t.Errorf("env %s from secret %v, want %s", k, env[k], want)
		}
	}

	sm := one(t, docs, "ServiceMonitor")
	ep := dig(sm, "spec", "endpoints", 0)
	if dig(ep, "port") != "debug" || dig(ep, "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %v, want port debug path /metrics", ep)
	}
	var debugSvc any
	for _, s := range kinds(docs, "Service") {
		if labelsMatch(dig(sm, "spec", "selector", "matchLabels"), dig(s, "metadata", "labels")) {
			debugSvc = s
		}
	}
	if debugSvc == nil {
		t.Fatal("no Service matches the ServiceMonitor's selector")
	}
	if dig(debugSvc, "spec", "ports", 0, "name") != "debug" {
		t.Errorf("the monitored Service has no port named debug: %v", dig(debugSvc, "spec", "ports"))
	}

	cfgPath, cfg := renderedConfig(t, docs)
	for _, kv := range [][2]any{
		{dig(cfg, "storage", "s3", "bucket"), "registry"},
		{dig(cfg, "redis", "addrs", 0), "redis:6379"},
		{dig(cfg, "storage", "dedup", "mode"), "full"},
		{dig(cfg, "storage", "cache", "blobdescriptor"), "redis"},
		{dig(cfg, "log", "level"), "warn"},
	} {
		if kv[0] != kv[1] {
			t.Errorf("rendered configuration has %v, want %v:\n%s", kv[0], kv[1], mustRead(t, cfgPath))
		}
	}
	configCheck(t, cfgPath)
}

// TestHelmChartRefuses: combinations that would lose data or not start are
// refused at render time with the reason.
func TestHelmChartRefuses(t *testing.T) {
	helm := clitool.Path(t, "helm")
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "cairn")
	for _, c := range []struct{ set, want string }{
		{"replicaCount=2", "replicaCount > 1 needs storage.type s3"},
		{"storage.type=s3", "storage.s3.bucket is required"},
		{"storage.type=s3,storage.s3.bucket=b,replicaCount=2", "redis.addr is required"},
		{"storage.type=nfs", `storage.type "nfs"`},
	} {
		_, errOut, err := runErr("", nil, helm, "template", "r", chart, "--set", c.set)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("helm template --set %s: %v\n%s\nwant a failure saying %q", c.set, err, errOut, c.want)
		}
	}
}

// render runs helm template and returns its documents.
func render(t *testing.T, helm, chart string, args ...string) []any {
	t.Helper()
	out := run(t, "", nil, helm, append([]string{"template", "r", chart}, args...)...)
	var docs []any
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var d any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("helm template output: %v\n%s", err, out)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// renderedConfig writes the ConfigMap's config.yml to a file, as the pod
// sees it mounted, and returns its path and parsed form.
func renderedConfig(t *testing.T, docs []any) (string, any) {
	t.Helper()
	data, ok := dig(one(t, docs, "ConfigMap"), "data", "config.yml").(string)
	if !ok {
		t.Fatal("the ConfigMap has no config.yml")
	}
	p := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg any
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatalf("config.yml: %v", err)
	}
	return p, cfg
}

func kinds(docs []any, kind string) []any {
	var out []any
	for _, d := range docs {
		if dig(d, "kind") == kind {
			out = append(out, d)
		}
	}
	return out
}

func one(t *testing.T, docs []any, kind string) any {
	t.Helper()
	ks := kinds(docs, kind)
	if len(ks) != 1 {
		t.Fatalf("%d %s documents rendered, want 1", len(ks), kind)
	}
	return ks[0]
}

// dig walks maps by key and lists by index; nil when a step is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func asList(v any) []any { l, _ := v.([]any); return l }

func containerPort(c any, name string) int {
	for _, p := range asList(dig(c, "ports")) {
		if dig(p, "name") == name {
			n, _ := dig(p, "containerPort").(int)
			return n
		}
	}
	return -1
}

func volume(t *testing.T, dep any, name string) any {
	t.Helper()
	for _, v := range asList(dig(dep, "spec", "template", "spec", "volumes")) {
		if dig(v, "name") == name {
			return v
		}
	}
	t.Fatalf("no volume %q in the Deployment", name)
	return nil
}

func labelsMatch(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	lab, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lab[k] != v {
			return false
		}
	}
	return true
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
