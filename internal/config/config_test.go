package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// setting is one configuration value and what it must be.
type setting struct {
	name      string
	got, want any
}

// wantSettings reports every setting whose value is not what it must be.
func wantSettings(t *testing.T, settings []setting) {
	t.Helper()
	for _, s := range settings {
		if s.got != s.want {
			t.Errorf("%s = %v, want %v", s.name, s.got, s.want)
		}
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	wantSettings(t, []setting{
		{"version", c.Version, ""},
		{"log.level", c.Log.Level, "info"},
		{"http.addr", c.HTTP.Addr, "127.0.0.1:5000"},
		{"driver", c.DriverName(), "filesystem"},
		{"rootdirectory", c.Storage.Filesystem.RootDirectory, "./cairn-data"},
		{"maxthreads", c.Storage.Filesystem.MaxThreads, 100},
		{"inmemory", c.Storage.InMemory == nil, true},
		{"delete.enabled", c.Storage.Delete.Enabled, true},
		{"uploadpurging.enabled", c.Storage.Maintenance.UploadPurging.Enabled, true},
		{"uploadpurging.age", c.Storage.Maintenance.UploadPurging.Age, 168 * time.Hour},
		{"uploadpurging.interval", c.Storage.Maintenance.UploadPurging.Interval, 24 * time.Hour},
		{"uploadpurging.dryrun", c.Storage.Maintenance.UploadPurging.DryRun, false},
		{"readonly.enabled", c.Storage.Maintenance.ReadOnly.Enabled, false},
	})
	if err := c.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

func TestParseMinimalDocumentsGiveDefaults(t *testing.T) {
	for _, doc := range []string{"", "\n", "# nothing\n", "version: 0.1\n", "---\n", "log:\nhttp:\nstorage:\n"} {
		c, warnings, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", doc, err)
		}
		if len(warnings) != 0 {
			t.Errorf("Parse(%q) warnings = %q", doc, warnings)
		}
		want := Default()
		want.Version = c.Version
		if !reflect.DeepEqual(c, want) {
			t.Errorf("Parse(%q) = %+v, want defaults %+v", doc, c, want)
		}
	}
}

// A configuration shaped like distribution's development config: every key
// is honoured, with no warning.
const distributionDevConfig = `version: 0.1
log:
  level: debug
  fields:
    service: registry
    environment: development
storage:
    delete:
      enabled: false
    cache:
        blobdescriptor: inmemory
    filesystem:
        rootdirectory: /srv/registry
        maxthreads: 64
    maintenance:
        uploadpurging:
            enabled: true
            age: 72h
            interval: 12h
            dryrun: true
        readonly:
            enabled: true
    tag:
      concurrencylimit: 4
http:
    addr: :5000
    secret: not-so-secret
    debug:
        addr: :5001
        prometheus:
            enabled: true
            path: /metrics
    headers:
        X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
notifications:
  endpoints:
    - name: alistener
      url: https://listener.example/event
      disabled: true
`

func TestDistributionDevConfigLoads(t *testing.T) {
	c, warnings, err := Parse([]byte(distributionDevConfig))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	if !slices.Equal(warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
	up := c.Storage.Maintenance.UploadPurging
	wantSettings(t, []setting{
		{"version", c.Version, "0.1"},
		{"log.level", c.Log.Level, "debug"},
		{"http.addr", c.HTTP.Addr, ":5000"},
		{"http.debug.addr", c.HTTP.Debug.Addr, ":5001"},
		{"http.debug.prometheus", c.HTTP.Debug.Prometheus, Prometheus{Enabled: true, Path: "/metrics"}},
		{"driver", c.DriverName(), "filesystem"},
		{"rootdirectory", c.Storage.Filesystem.RootDirectory, "/srv/registry"},
		{"maxthreads", c.Storage.Filesystem.MaxThreads, 64},
		{"delete.enabled", c.Storage.Delete.Enabled, false},
		{"uploadpurging", up, UploadPurging{Enabled: true, Age: 72 * time.Hour, Interval: 12 * time.Hour, DryRun: true}},
		{"readonly.enabled", c.Storage.Maintenance.ReadOnly.Enabled, true},
	})
}

// distribution's example config protects the registry with htpasswd; cairn
// reads the section as distribution does.
func TestAuthSectionIsRead(t *testing.T) {
	doc := `version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/registry
http:
  addr: :5000
auth:
  htpasswd:
    realm: basic-realm
    path: /etc/registry
`
	c, warnings, err := Parse([]byte(doc))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v, warnings %q", err, warnings)
	}
	if c.Auth.Htpasswd == nil || *c.Auth.Htpasswd != (Htpasswd{Realm: "basic-realm", Path: "/etc/registry"}) || c.Auth.Token != nil {
		t.Errorf("auth = %+v", c.Auth)
	}
}

// An unknown key under a section stops loading, naming the key, where it
// is and the key it most likely misspells: ignored, a misspelt
// rootdirectory moved the store to distribution's default.
func TestUnknownKeysStopLoading(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"misspelt rootdirectory", "storage:\n  filesystem:\n    rootdir: /x\n", "config: storage.filesystem.rootdir: unknown key; did you mean rootdirectory? (line 3)"},
		{"nested, nothing near", "storage:\n  filesystem:\n    rootdirectory: /x\n    bar: 1\n", "config: storage.filesystem.bar: unknown key (line 4)"},
		{"deep under known sections", "storage:\n  maintenance:\n    uploadpurging:\n      agee: 1h\n", "config: storage.maintenance.uploadpurging.agee: unknown key; did you mean age? (line 4)"},
		{"named once, not its children", "http:\n  addr: :1\n  extra:\n    a: 1\n    b: 2\n", "config: http.extra: unknown key (line 3)"},
		{"case matters as in distribution", "http:\n  Addr: :1\n", "config: http.Addr: unknown key; did you mean addr? (line 2)"},
		{"inside a driver", "storage:\n  inmemory:\n    size: 3\n", "config: storage.inmemory.size: unknown key (line 3)"},
		{"object store parameter", "storage:\n  s3:\n    bucket: b\n    region: r\n    secretkeys: x\n", "config: storage.s3.secretkeys: unknown key; did you mean secretkey? (line 5)"},
		{"in a list of sections", "health:\n  tcp:\n    - addr: a:1\n      intervall: 1s\n", "config: health.tcp[0].intervall: unknown key; did you mean interval? (line 4)"},
		{"the first, in order", "a: 1\nlog:\n  colour: x\nb: 2\n", "config: log.colour: unknown key (line 3)"},
		{"a top-level key misspelling a section", "storgae:\n  filesystem:\n    rootdirectory: /x\n", "config: storgae: unknown key; did you mean storage? (line 1)"},
		{"a driver misspelt", "storage:\n  filesytem:\n    rootdirectory: /x\n", "config: storage.filesytem: unknown storage driver (cairn supports filesystem, inmemory, s3, gcs, azure); did you mean filesystem? (line 2)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := Parse([]byte(tc.doc))
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse = %+v, %v\nwant error %s", c, err, tc.want)
			}
		})
	}
}

// Top-level keys that misspell no section are warnings: a file may keep
// YAML anchors under keys of its own (TestAnchorsAndMergeKeys).
func TestUnknownTopLevelKeysWarn(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string
	}{
		{"top level", "colour: blue\n", []string{"unknown key colour; ignored (line 1)"}},
		{"several, in order", "a: 1\nlog:\n  level: info\nb: 2\n", []string{"unknown key a; ignored (line 1)", "unknown key b; ignored (line 4)"}},
		{"obsolete distribution key", "reporting:\n  bugsnag: {}\n", []string{"reporting is obsolete (current distribution ignores it too); ignored (line 1)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, warnings, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(warnings, tc.want) {
				t.Errorf("warnings = %q, want %q", warnings, tc.want)
			}
		})
	}
}

func TestNearestKey(t *testing.T) {
	known := []string{"rootdirectory", "maxthreads", "syncblobs", "addr", "tags", "storage", "proxy"}
	for key, want := range map[string]string{
		"rootdir": "rootdirectory", "rootdirectroy": "rootdirectory", "RootDirectory": "rootdirectory",
		"maxthread": "maxthreads", "syncblob": "syncblobs", "adr": "addr", "tag": "tags", "storge": "storage",
		"purge": "", "colour": "", "a": "", "x": "", "port": "",
	} {
		if got := nearest(key, known); got != want {
			t.Errorf("nearest(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestInvalidValuesAreRejectedNamingTheKey(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"log level", "log:\n  level: loud\n", `config: log.level: "loud" is not one of debug, info, warn, error`},
		{"addr without port", "http:\n  addr: localhost\n", `config: http.addr: "localhost": missing port in address`},
		{"addr with empty value", "http:\n  addr: ''\n", `config: http.addr: "": missing port in address`},
		{"addr with bad port", "http:\n  addr: ':99999'\n", `config: http.addr: ":99999": port "99999" is not a number from 0 to 65535`},
		{"addr with named port", "http:\n  addr: 'localhost:http'\n", `config: http.addr: "localhost:http": port "http" is not a number`},
		{"version", "version: 0.2\n", `config: version: "0.2" is not supported`},
		{"boolean", "storage:\n  delete:\n    enabled: maybe\n", `config: storage.delete.enabled: "maybe" is not a boolean (true or false) (line 3)`},
		{"boolean given a mapping", "storage:\n  delete:\n    enabled: {a: 1}\n", `config: storage.delete.enabled: a mapping is not a boolean`},
		{"duration without unit", "storage:\n  maintenance:\n    uploadpurging:\n      age: 3600\n", `config: storage.maintenance.uploadpurging.age: 3600 has no unit; write a duration such as 168h or 30m (line 4)`},
		{"duration garbage", "storage:\n  maintenance:\n    uploadpurging:\n      interval: soon\n", `config: storage.maintenance.uploadpurging.interval: "soon" is not a duration`},
		{"negative age", "storage:\n  maintenance:\n    uploadpurging:\n      age: -1h\n", `config: storage.maintenance.uploadpurging.age: must be positive, not -1h0m0s`},
		{"zero interval", "storage:\n  maintenance:\n    uploadpurging:\n      interval: 0s\n", `config: storage.maintenance.uploadpurging.interval: must be positive, not 0s`},
		{"empty rootdirectory", "storage:\n  filesystem:\n    rootdirectory: ''\n", `config: storage.filesystem.rootdirectory: must not be empty`},
		{"integer", "storage:\n  filesystem:\n    maxthreads: lots\n", `config: storage.filesystem.maxthreads: "lots" is not an integer (line 3)`},
		{"fractional integer", "storage:\n  filesystem:\n    maxthreads: 1.5\n", `config: storage.filesystem.maxthreads: "1.5" is not an integer`},
		{"section given a list", "http:\n  - addr\n", `config: http: expected a mapping of keys, not a list (line 2)`},
		{"string given a mapping", "http:\n  addr:\n    port: 1\n", `config: http.addr: expected a string, not a mapping`},
		{"dropped driver", "storage:\n  swift:\n    container: b\n", `config: storage.swift: unknown storage driver (cairn supports filesystem, inmemory, s3, gcs, azure) (line 2)`},
		{"dropped driver short form", "storage: oss\n", `config: storage: "oss" is not a storage driver`},
		{"short form that is no driver", "storage: delete\n", `config: storage: "delete" is not a storage driver (cairn supports filesystem, inmemory, s3, gcs, azure)`},
		{"tls without key", "http:\n  addr: :443\n  tls:\n    certificate: /c.pem\n", `config: http.tls.key: required with http.tls`},
		{"duplicate key", "http:\n  addr: :1\n  addr: :2\n", `config: http.addr: given twice (lines 2 and 3)`},
		{"yaml syntax", "http:\n  addr: :1\n bad\n", `config: document: yaml: line`},
		{"top level list", "- a\n- b\n", `config: the configuration must be a mapping of keys, not a list (line 1)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("err = %q\nwant prefix %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("err spans lines: %q", err)
			}
		})
	}
}

func TestTwoDriversAreRejected(t *testing.T) {
	for _, doc := range []string{
		"storage:\n  filesystem:\n    rootdirectory: /x\n  inmemory:\n",
		"storage:\n  inmemory: {}\n  delete:\n    enabled: true\n  s3:\n    bucket: b\n",
	} {
		_, _, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), "more than one storage driver") {
			t.Errorf("Parse(%q) err = %v, want more than one storage driver", doc, err)
		}
	}
	// A file's driver plus another from the environment, as distribution refuses too.
	path := writeFile(t, "storage:\n  filesystem:\n    rootdirectory: /x\n")
	_, _, err := LoadWithEnv(path, []string{"REGISTRY_STORAGE_INMEMORY="})
	if err == nil || err.Error() != "config: storage: more than one storage driver (filesystem, inmemory); give exactly one" {
		t.Errorf("LoadWithEnv err = %v", err)
	}
}

func TestInMemorySelection(t *testing.T) {
	for _, doc := range []string{
		"storage:\n  inmemory:\n",
		"storage:\n  inmemory: ~\n",
		"storage:\n  inmemory: {}\n",
		"storage: inmemory\n",
		"storage:\n  delete:\n    enabled: false\n  inmemory:\n",
	} {
		c, warnings, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", doc, err)
		}
		if len(warnings) != 0 {
			t.Errorf("Parse(%q) warnings = %q", doc, warnings)
		}
		if c.DriverName() != "inmemory" || c.Storage.InMemory == nil || c.Storage.Filesystem != nil {
			t.Errorf("Parse(%q): driver %q, inmemory %v, filesystem %v", doc, c.DriverName(), c.Storage.InMemory, c.Storage.Filesystem)
		}
	}
}

func TestFilesystemSectionUsesDistributionDefaults(t *testing.T) {
	cases := []struct {
		doc        string
		root       string
		maxThreads int
	}{
		{"storage:\n  filesystem:\n", "/var/lib/registry", 100},
		{"storage: filesystem\n", "/var/lib/registry", 100},
		{"storage:\n  filesystem:\n    maxthreads: 10\n", "/var/lib/registry", 25},
		{"storage:\n  filesystem:\n    maxthreads: '200'\n", "/var/lib/registry", 200},
		{"storage:\n  delete:\n    enabled: true\n", "./cairn-data", 100},
	}
	for _, tc := range cases {
		c, _, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.doc, err)
		}
		if fs := c.Storage.Filesystem; fs == nil || fs.RootDirectory != tc.root || fs.MaxThreads != tc.maxThreads {
			t.Errorf("Parse(%q) filesystem = %+v, want %s, %d", tc.doc, fs, tc.root, tc.maxThreads)
		}
	}
}

func TestLogLevelSpellings(t *testing.T) {
	cases := []struct {
		doc, want string
		warning   string
	}{
		{"log:\n  level: WARNING\n", "warn", ""},
		{"log:\n  level: Debug\n", "debug", ""},
		{"log:\n  level: error\n", "error", ""},
		{"loglevel: debug\n", "debug", "loglevel is deprecated; read as log.level (line 1)"},
		{"log:\n  formatter: text\nloglevel: error\n", "error", "loglevel is deprecated; read as log.level (line 3)"},
		{"loglevel: debug\nlog:\n  level: error\n", "error", "loglevel is deprecated and log.level is also given; loglevel ignored (line 1)"},
		{"loglevel: debug\nlog:\n", "debug", "loglevel is deprecated; read as log.level (line 1)"},
	}
	for _, tc := range cases {
		c, warnings, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.doc, err)
		}
		if c.Log.Level != tc.want {
			t.Errorf("Parse(%q) log.level = %q, want %q", tc.doc, c.Log.Level, tc.want)
		}
		if tc.warning != "" && !slices.Contains(warnings, tc.warning) {
			t.Errorf("Parse(%q) warnings = %q, want %q among them", tc.doc, warnings, tc.warning)
		}
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	doc := `purge: &purge
  enabled: true
  age: 2h
storage:
  maintenance:
    uploadpurging:
      <<: *purge
      age: 3h
      interval: 1h
`
	c, warnings, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if up := c.Storage.Maintenance.UploadPurging; up.Age != 3*time.Hour || up.Interval != time.Hour || !up.Enabled {
		t.Errorf("uploadpurging = %+v, want own age 3h to win over the merged 2h", up)
	}
	if !slices.Equal(warnings, []string{"unknown key purge; ignored (line 1)"}) {
		t.Errorf("warnings = %q", warnings)
	}
}

func TestLoad(t *testing.T) {
	path := writeFile(t, "colour: red\nhttp:\n  addr: 0.0.0.0:6000\n")
	c, warnings, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "0.0.0.0:6000" {
		t.Errorf("addr = %q", c.HTTP.Addr)
	}
	if want := "unknown key colour; ignored (" + path + ":1)"; !slices.Equal(warnings, []string{want}) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}

	typo := writeFile(t, "http:\n  addr: 0.0.0.0:6000\n  adr: :1\n")
	_, _, err = Load(typo)
	if want := "config: http.adr: unknown key; did you mean addr? (" + typo + ":3)"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}

	bad := writeFile(t, "storage:\n  delete:\n    enabled: perhaps\n")
	_, _, err = Load(bad)
	if want := `config: storage.delete.enabled: "perhaps" is not a boolean (true or false) (` + bad + `:3)`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}

	_, _, err = Load(filepath.Join(t.TempDir(), "missing.yml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

func TestParseAndLoadIgnoreTheEnvironment(t *testing.T) {
	t.Setenv("REGISTRY_HTTP_ADDR", "0.0.0.0:7000")
	c, _, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:5000" {
		t.Errorf("Parse read the environment: addr = %q", c.HTTP.Addr)
	}
	c, _, err = Load(writeFile(t, "log:\n  level: info\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:5000" {
		t.Errorf("Load read the environment: addr = %q", c.HTTP.Addr)
	}
}

func TestValidateHandBuiltConfig(t *testing.T) {
	cases := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"two drivers", func(c *Config) { c.Storage.InMemory = &InMemory{} }, "config: storage: more than one storage driver (filesystem, inmemory); give exactly one"},
		{"no driver", func(c *Config) { c.Storage.Filesystem = nil }, "config: storage: no storage driver selected"},
		{"few threads", func(c *Config) { c.Storage.Filesystem.MaxThreads = 3 }, "config: storage.filesystem.maxthreads: 3 is below the minimum of 25"},
		{"level spelling accepted", func(c *Config) { c.Log.Level = "Warning" }, ""},
		{"port zero", func(c *Config) { c.HTTP.Addr = "127.0.0.1:0" }, ""},
		{"ipv6", func(c *Config) { c.HTTP.Addr = "[::1]:5000" }, ""},
		{"ipv6 without brackets", func(c *Config) { c.HTTP.Addr = "::1:5000" }, `config: http.addr: "::1:5000": too many colons in address`},
	}
	for _, tc := range cases {
		c := Default()
		tc.modify(c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: Validate() = %v, want %s", tc.name, err, tc.want)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
