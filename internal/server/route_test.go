package server

import "testing"

func TestParseRoute(t *testing.T) {
	cases := []struct {
		path string
		want route
	}{
		{"/v2/", route{kind: routeBase}},
		{"/v2", route{kind: routeBase}},
		{"/v2/_catalog", route{kind: routeCatalog}},
		{"/v2/a/tags/list", route{kind: routeTags, name: "a"}},
		{"/v2/a/b/c/manifests/latest", route{kind: routeManifest, name: "a/b/c", ref: "latest"}},
		{"/v2/a/referrers/sha256:00", route{kind: routeReferrers, name: "a", ref: "sha256:00"}},
		{"/v2/a/blobs/sha256:00", route{kind: routeBlob, name: "a", ref: "sha256:00"}},
		{"/v2/a/blobs/uploads/", route{kind: routeUploadStart, name: "a"}},
		{"/v2/a/blobs/uploads", route{kind: routeUploadStart, name: "a"}},
		{"/v2/a/blobs/uploads/123", route{kind: routeUpload, name: "a", ref: "123"}},
		// Names may contain endpoint words; the route is matched from the end.
		{"/v2/blobs/manifests/manifests/x", route{kind: routeManifest, name: "blobs/manifests", ref: "x"}},
		{"/v2/a/blobs/uploads/blobs/sha256:00", route{kind: routeBlob, name: "a/blobs/uploads", ref: "sha256:00"}},
		{"/v2/tags/list/tags/list", route{kind: routeTags, name: "tags/list"}},
		{"/v2/a", route{}},
		{"/v2/a/b", route{}},
		{"/v3/a/tags/list", route{}},
		{"/v2/a/unknown/x", route{}},
	}
	for _, c := range cases {
		if got := parseRoute(c.path); got != c.want {
			t.Errorf("parseRoute(%q) = %+v, want %+v", c.path, got, c.want)
		}
	}
}

func TestParseRange(t *testing.T) {
	const size = 100
	cases := []struct {
		header               string
		start, length        int64
		partial, satisfiable bool
	}{
		{"", 0, size, false, true},
		{"bytes=0-9", 0, 10, true, true},
		{"bytes=10-", 10, 90, true, true},
		{"bytes=90-200", 90, 10, true, true},
		{"bytes=-5", 95, 5, true, true},
		{"bytes=-500", 0, 100, true, true},
		{"bytes=100-", 0, 0, false, false},
		{"bytes=150-160", 0, 0, false, false},
		{"bytes=-0", 0, 0, false, false},
		{"bytes=0-1,5-6", 0, size, false, true}, // several ranges: whole blob
		{"items=0-1", 0, size, false, true},
		{"bytes=5-2", 0, 0, false, false},   // inverted: unsatisfiable
		{"bytes=x-2", 0, size, false, true}, // malformed: ignored
	}
	for _, c := range cases {
		start, length, partial, ok := parseRange(c.header, size)
		if start != c.start || length != c.length || partial != c.partial || ok != c.satisfiable {
			t.Errorf("parseRange(%q) = %d,%d,%v,%v want %d,%d,%v,%v", c.header, start, length, partial, ok,
				c.start, c.length, c.partial, c.satisfiable)
		}
	}
}
