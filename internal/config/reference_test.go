package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Keys of distribution's reference that cairn refuses, stopping start-up,
// with the reason each must print.
var wantRefused = map[string]string{
	"middleware.registry":   "code built into a distribution binary",
	"middleware.repository": "code built into a distribution binary",
}

// Values of the reference that are placeholders or fragments, no valid
// configuration (distribution cannot load the first, and silently serves
// plain HTTP with the second), with the error each must give and the key
// to drop before loading again.
var wantInvalid = map[string]struct{ why, drop string }{
	"notifications.endpoints[0].headers": {`expected a mapping, not "<http.Header>"`, "notifications.endpoints[0].headers"},
	"http.tls.letsencrypt.cachefile":     {"required", "http.tls"},
	"proxy.username":                     {"expected a string, not a list", "proxy.username"},
	"proxy.password":                     {"expected a string, not a list", "proxy.password"},
}

// Keys cairn ignores with a printed reason.
var wantIgnored = map[string]string{}

// notHere are keys reported as not supported yet that this test accepts:
// none.
var notHere = []string{}

// TestDistributionReference loads every configuration document of
// distribution's reference (testdata/distribution: the full list of
// options, each section's example, the cmd/registry configurations),
// split where the reference holds alternatives one configuration cannot
// (several storage drivers or auth methods, a key given twice). No key may
// be unknown or "not supported yet"; each refused key stops loading with
// its reason, and each ignored one is reported with its reason.
func TestDistributionReference(t *testing.T) {
	files, err := filepath.Glob("testdata/distribution/*.yml")
	if err != nil || len(files) < 10 {
		t.Fatalf("testdata: %v, %d files", err, len(files))
	}
	refused := map[string]bool{}
	ignored := map[string]bool{}
	loaded := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			var root yaml.Node
			if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			for j, v := range variants(root.Content[0]) {
				name := fmt.Sprintf("%s#%d.%d", filepath.Base(f), i, j)
				loadReference(t, name, v, refused, ignored)
				loaded++
			}
		}
	}
	if got := slices.Sorted(maps.Keys(refused)); !slices.Equal(got, slices.Sorted(maps.Keys(wantRefused))) {
		t.Errorf("refused keys %q, want %q", got, slices.Sorted(maps.Keys(wantRefused)))
	}
	if got := slices.Sorted(maps.Keys(ignored)); !slices.Equal(got, slices.Sorted(maps.Keys(wantIgnored))) {
		t.Errorf("ignored keys %q, want %q", got, slices.Sorted(maps.Keys(wantIgnored)))
	}
	t.Logf("%d configurations from %d files", loaded, len(files))
}

var errPath = regexp.MustCompile(`^config: ([a-z0-9_.\[\]]+)[: ]`)

// loadReference parses doc, and while loading stops at a refused key,
// checks the reason, drops the key and loads again.
func loadReference(t *testing.T, name string, doc *yaml.Node, refused, ignored map[string]bool) {
	t.Helper()
	for range 10 {
		data, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, warnings, err := Parse(data)
		if err != nil {
			m := errPath.FindStringSubmatch(err.Error())
			if m == nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			why, ok := wantRefused[m[1]]
			drop := m[1]
			if bad, placeholder := wantInvalid[m[1]]; placeholder {
				why, ok, drop = bad.why, true, bad.drop
			}
			if !ok || !strings.Contains(err.Error(), why) {
				t.Errorf("%s: refused %s: %v (want a refusal only of %q, with its reason)", name, m[1], err, slices.Sorted(maps.Keys(wantRefused)))
				return
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: the refusal is not one line: %q", name, err)
			}
			if _, placeholder := wantInvalid[m[1]]; !placeholder {
				refused[m[1]] = true
			}
			if !removePath(doc, drop) {
				t.Fatalf("%s: cannot remove %s", name, drop)
			}
			pruneEmpty(doc, drop)
			continue
		}
	warnings:
		for _, w := range warnings {
			for _, k := range notHere {
				if strings.HasPrefix(w, k+" is not supported yet") {
					continue warnings
				}
			}
			switch {
			case strings.Contains(w, "not supported yet"), strings.Contains(w, "unknown key"):
				t.Errorf("%s: %s", name, w)
			case strings.Contains(w, " is ignored: "):
				key := strings.Fields(w)[0]
				if why, ok := wantIgnored[key]; !ok || !strings.Contains(w, why) {
					t.Errorf("%s: unexpected %q", name, w)
				}
				ignored[key] = true
			}
		}
		return
	}
	t.Errorf("%s: still refused after 10 keys dropped", name)
}

// variants splits a reference document into configurations one registry
// can load: one per storage driver, one per auth method, and, where a
// mapping gives a key twice, one with each occurrence.
func variants(root *yaml.Node) []*yaml.Node {
	out := []*yaml.Node{root}
	if hasDuplicates(root) {
		out = []*yaml.Node{dedupKeys(deepCopy(root), true), dedupKeys(deepCopy(root), false)}
	}
	out = splitChoices(out, "storage", []string{"filesystem", "azure", "gcs", "s3", "inmemory"})
	out = splitChoices(out, "auth", []string{"silly", "token", "htpasswd"})
	// A certificate and Let's Encrypt are alternatives too.
	var split []*yaml.Node
	for _, d := range out {
		tls := child(child(d, "http"), "tls")
		if child(tls, "letsencrypt") == nil || child(tls, "certificate") == nil {
			split = append(split, d)
			continue
		}
		files, acme := deepCopy(d), deepCopy(d)
		removePath(files, "http.tls.letsencrypt")
		removePath(acme, "http.tls.certificate")
		removePath(acme, "http.tls.key")
		split = append(split, files, acme)
	}
	return split
}

// splitChoices returns, for each document whose section holds several of
// choices, one copy per choice with the others removed.
func splitChoices(docs []*yaml.Node, section string, choices []string) []*yaml.Node {
	var out []*yaml.Node
	for _, d := range docs {
		sec := child(d, section)
		var present []string
		for _, c := range choices {
			if sec != nil && child(sec, c) != nil {
				present = append(present, c)
			}
		}
		if len(present) < 2 {
			out = append(out, d)
			continue
		}
		for _, keep := range present {
			cp := deepCopy(d)
			for _, other := range present {
				if other != keep {
					removePath(cp, section+"."+other)
				}
			}
			out = append(out, cp)
		}
	}
	return out
}

// pruneEmpty removes the sections along path that removing its last key
// left empty (http.tls holding only letsencrypt), as a user dropping the
// refused key would.
func pruneEmpty(root *yaml.Node, path string) {
	for {
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			return
		}
		path = path[:i]
		n := root
		for _, seg := range strings.Split(path, ".") {
			n = child(n, seg)
		}
		if n == nil || n.Kind != yaml.MappingNode || len(n.Content) > 0 {
			return
		}
		removePath(root, path)
	}
}

func child(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func hasDuplicates(n *yaml.Node) bool {
	if n.Kind == yaml.MappingNode {
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if seen[n.Content[i].Value] {
				return true
			}
			seen[n.Content[i].Value] = true
		}
	}
	return slices.ContainsFunc(n.Content, hasDuplicates)
}

// dedupKeys keeps the first (or the last) occurrence of every key given
// twice in a mapping.
func dedupKeys(n *yaml.Node, first bool) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		keep := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if _, ok := keep[n.Content[i].Value]; !ok || !first {
				keep[n.Content[i].Value] = i
			}
		}
		var content []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if keep[n.Content[i].Value] == i {
				content = append(content, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = content
	}
	for _, c := range n.Content {
		dedupKeys(c, first)
	}
	return n
}

func deepCopy(n *yaml.Node) *yaml.Node {
	cp := *n
	cp.Content = make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		cp.Content[i] = deepCopy(c)
	}
	return &cp
}

// removePath removes the key (or list item, "endpoints[0]") at a dotted
// path.
func removePath(root *yaml.Node, path string) bool {
	segs := strings.Split(path, ".")
	n := root
	for i, seg := range segs {
		name, idx := seg, -1
		if open := strings.IndexByte(seg, '['); open >= 0 {
			name = seg[:open]
			idx, _ = strconv.Atoi(strings.TrimSuffix(seg[open+1:], "]"))
		}
		last := i == len(segs)-1
		found := false
		for k := 0; k+1 < len(n.Content); k += 2 {
			if n.Content[k].Value != name {
				continue
			}
			found = true
			switch {
			case last && idx < 0:
				n.Content = append(n.Content[:k], n.Content[k+2:]...)
				return true
			case idx >= 0:
				list := n.Content[k+1]
				if idx >= len(list.Content) {
					return false
				}
				if last {
					list.Content = append(list.Content[:idx], list.Content[idx+1:]...)
					return true
				}
				n = list.Content[idx]
			default:
				n = n.Content[k+1]
			}
			break
		}
		if !found {
			return false
		}
	}
	return false
}

// TestDistributionReferenceThroughEnvironment sets every key of the
// reference (its filesystem, silly-auth configuration) through REGISTRY_*
// variables instead of the file: each is read as the file's key is.
func TestDistributionReferenceThroughEnvironment(t *testing.T) {
	data, err := os.ReadFile("testdata/distribution/reference.yml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	doc := variants(root.Content[0])[0]
	for k := range wantRefused {
		removePath(doc, k)
	}
	for _, v := range wantInvalid {
		if v.drop != "http.tls" {
			removePath(doc, v.drop)
		}
	}
	var environ []string
	var walk func(n *yaml.Node, path []string)
	walk = func(n *yaml.Node, path []string) {
		if n.Kind == yaml.MappingNode && len(n.Content) > 0 {
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], append(path, n.Content[i].Value))
			}
			return
		}
		flow(n)
		v, err := yaml.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		name := "REGISTRY_" + strings.ToUpper(strings.Join(path, "_"))
		environ = append(environ, name+"="+strings.TrimSpace(string(v)))
	}
	walk(doc, nil)
	if len(environ) < 60 {
		t.Fatalf("only %d variables", len(environ))
	}
	c, warnings, err := LoadWithEnv("", environ)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warnings {
		name, _, _ := strings.Cut(w, ": ")
		key := strings.ToLower(strings.TrimPrefix(name, "REGISTRY_"))
		switch {
		case strings.HasPrefix(key, "middleware") || strings.HasPrefix(key, "storage_redirect"),
			strings.Contains(w, "loglevel is deprecated"):
		default:
			t.Errorf("%s", w)
		}
	}
	if c.Log.Formatter != "text" || c.Log.Fields["environment"] != "staging" || c.HTTP.Prefix != "/my/nested/registry/" ||
		c.Redis == nil || c.Redis.PoolSize != 64 || len(c.Health.TCP) != 1 || c.Health.TCP[0].Threshold != 3 ||
		c.Storage.Tag.ConcurrencyLimit != 8 || c.Catalog.MaxEntries != 1000 || c.Auth.Silly == nil ||
		len(c.Validation.Manifests.URLs.Deny) != 1 || c.HTTP.Headers["x-content-type-options"][0] != "nosniff" {
		t.Errorf("keys not read from the environment: %+v", c)
	}
	t.Logf("%d variables", len(environ))
}

// flow writes n's collections in flow style, as one variable's value.
func flow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flow(c)
	}
}
