package config

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnvOverrides(t *testing.T) {
	const fileFS = "storage:\n  filesystem:\n    rootdirectory: /from/file\n  delete:\n    enabled: true\nhttp:\n  addr: :5000\n"
	cases := []struct {
		name     string
		file     string // "" means no file
		env      []string
		check    func(*Config) string // returns what is wrong
		warnings []string
	}{
		{
			name: "http.addr over defaults",
			env:  []string{"REGISTRY_HTTP_ADDR=0.0.0.0:6000", "PATH=/bin", "HTTP_ADDR=:1"},
			check: func(c *Config) string {
				return want("http.addr", c.HTTP.Addr, "0.0.0.0:6000")
			},
		},
		{
			name: "file value overridden",
			file: fileFS,
			env:  []string{"REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/from/env", "REGISTRY_STORAGE_DELETE_ENABLED=false"},
			check: func(c *Config) string {
				return want("rootdirectory", c.Storage.Filesystem.RootDirectory, "/from/env") +
					want("delete", c.Storage.Delete.Enabled, false) +
					want("addr", c.HTTP.Addr, ":5000")
			},
		},
		{
			name: "rootdirectory over the default driver",
			env:  []string{"REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/srv"},
			check: func(c *Config) string {
				return want("rootdirectory", c.Storage.Filesystem.RootDirectory, "/srv")
			},
		},
		{
			name: "a filesystem parameter keeps the default directory",
			env:  []string{"REGISTRY_STORAGE_FILESYSTEM_MAXTHREADS=50"},
			check: func(c *Config) string {
				return want("rootdirectory", c.Storage.Filesystem.RootDirectory, "./cairn-data") +
					want("maxthreads", c.Storage.Filesystem.MaxThreads, 50)
			},
		},
		{
			name: "log level and durations",
			env: []string{
				"REGISTRY_LOG_LEVEL=DEBUG",
				"REGISTRY_STORAGE_MAINTENANCE_UPLOADPURGING_AGE=2h",
				"REGISTRY_STORAGE_MAINTENANCE_UPLOADPURGING_INTERVAL=30m",
				"REGISTRY_STORAGE_MAINTENANCE_UPLOADPURGING_DRYRUN=true",
				"REGISTRY_STORAGE_MAINTENANCE_READONLY_ENABLED=yes",
			},
			check: func(c *Config) string {
				up := c.Storage.Maintenance.UploadPurging
				return want("log.level", c.Log.Level, "debug") +
					want("age", up.Age, 2*time.Hour) +
					want("interval", up.Interval, 30*time.Minute) +
					want("dryrun", up.DryRun, true) +
					want("readonly", c.Storage.Maintenance.ReadOnly.Enabled, true)
			},
		},
		{
			name: "deprecated loglevel",
			env:  []string{"REGISTRY_LOGLEVEL=error"},
			check: func(c *Config) string {
				return want("log.level", c.Log.Level, "error")
			},
			warnings: []string{"REGISTRY_LOGLEVEL: loglevel is deprecated; read as log.level"},
		},
		{
			name: "inmemory replaces the default driver",
			env:  []string{"REGISTRY_STORAGE_INMEMORY="},
			check: func(c *Config) string {
				return want("driver", c.DriverName(), "inmemory") + want("filesystem nil", c.Storage.Filesystem == nil, true)
			},
		},
		{
			name: "short form switches the file's driver",
			file: fileFS,
			env:  []string{"REGISTRY_STORAGE=inmemory"},
			check: func(c *Config) string {
				return want("driver", c.DriverName(), "inmemory") +
					want("filesystem nil", c.Storage.Filesystem == nil, true) +
					want("delete kept", c.Storage.Delete.Enabled, true)
			},
		},
		{
			// Applied in lexical order: the switch first, then its parameter.
			name: "short form then parameter",
			file: "storage: inmemory\n",
			env:  []string{"REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/x", "REGISTRY_STORAGE=filesystem"},
			check: func(c *Config) string {
				return want("driver", c.DriverName(), "filesystem") + want("rootdirectory", c.Storage.Filesystem.RootDirectory, "/x")
			},
		},
		{
			name: "whole section as YAML",
			env:  []string{"REGISTRY_STORAGE_MAINTENANCE_UPLOADPURGING={enabled: false, age: 1h}"},
			check: func(c *Config) string {
				up := c.Storage.Maintenance.UploadPurging
				return want("enabled", up.Enabled, false) + want("age", up.Age, time.Hour) + want("interval kept", up.Interval, 24*time.Hour)
			},
		},
		{
			name: "unknown and unsupported variables warn",
			env: []string{
				"REGISTRY_PORT=tcp://10.0.0.1:5000",
				"REGISTRY_HTTP_SECRET=s3cr3t",
				"REGISTRY_STORAGE_FILESYSTEM_COLOUR=red",
				"REGISTRY_STORAGE_FILESYSTEM_ROOTDIR=/x",
				"REGISTRY__X=1",
				"REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=",
			},
			check: func(c *Config) string {
				return want("rootdirectory", c.Storage.Filesystem.RootDirectory, "./cairn-data")
			},
			warnings: []string{
				"REGISTRY_PORT: unknown key port; ignored",
				"REGISTRY_STORAGE_FILESYSTEM_COLOUR: unknown key storage.filesystem.colour; ignored",
				"REGISTRY_STORAGE_FILESYSTEM_ROOTDIR: unknown key storage.filesystem.rootdir (did you mean rootdirectory?); ignored",
				"REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY: empty value for storage.filesystem.rootdirectory; ignored",
				"REGISTRY__X: not a configuration key; ignored",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			c, warnings, err := LoadWithEnv(path, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(c); msg != "" {
				t.Error(msg)
			}
			if !slices.Equal(warnings, tc.warnings) {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warnings, "\n"), strings.Join(tc.warnings, "\n"))
			}
		})
	}
}

func TestApplyEnvOnDefault(t *testing.T) {
	c := Default()
	warnings, err := ApplyEnv(c, []string{"REGISTRY_STORAGE_INMEMORY={}", "REGISTRY_HTTP_ADDR=127.0.0.1:0"})
	if err != nil || len(warnings) != 0 {
		t.Fatalf("ApplyEnv: %q, %v", warnings, err)
	}
	if c.DriverName() != "inmemory" || c.HTTP.Addr != "127.0.0.1:0" {
		t.Errorf("driver %q addr %q", c.DriverName(), c.HTTP.Addr)
	}

	// No variables: the configuration is only validated.
	c = Default()
	if warnings, err := ApplyEnv(c, nil); err != nil || len(warnings) != 0 {
		t.Errorf("ApplyEnv(nil) = %q, %v", warnings, err)
	}
	c.HTTP.Addr = "nowhere"
	if _, err := ApplyEnv(c, nil); err == nil {
		t.Error("ApplyEnv did not validate")
	}
}

func TestEnvErrorsNameTheVariableAndKey(t *testing.T) {
	cases := []struct {
		env  string
		want string
	}{
		{"REGISTRY_STORAGE_DELETE_ENABLED=perhaps", `config: REGISTRY_STORAGE_DELETE_ENABLED: storage.delete.enabled: "perhaps" is not a boolean (true or false)`},
		{"REGISTRY_STORAGE_MAINTENANCE_UPLOADPURGING_AGE=3600", `config: REGISTRY_STORAGE_MAINTENANCE_UPLOADPURGING_AGE: storage.maintenance.uploadpurging.age: 3600 has no unit; write a duration such as 168h or 30m`},
		{"REGISTRY_AUTH_HTPASSWD_PATH=/etc/htpasswd", `config: auth.htpasswd.realm: required`},
		{"REGISTRY_AUTH_KEYSTONE_URL=http://x", `config: REGISTRY_AUTH_KEYSTONE_URL: auth.keystone: unknown authentication method (cairn supports htpasswd, ldap, oidc, token, silly, anonymous); without it the registry would be unauthenticated`},
		{"REGISTRY_STORAGE_SWIFT_CONTAINER=b", `config: REGISTRY_STORAGE_SWIFT_CONTAINER: storage.swift: unknown storage driver`},
		{"REGISTRY_HTTP_ADDR=nowhere", `config: http.addr: "nowhere": missing port in address`},
		{"REGISTRY_LOG_LEVEL=loud", `config: log.level: "loud" is not one of debug, info, warn, error`},
		{"REGISTRY_VERSION=0.2", `config: version: "0.2" is not supported; cairn reads version 0.1 configurations`},
		{"REGISTRY_HTTP_ADDR=[oops", `config: REGISTRY_HTTP_ADDR: value is not valid YAML: yaml: `},
	}
	for _, tc := range cases {
		_, _, err := LoadWithEnv("", []string{tc.env})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant prefix %s", tc.env, err, tc.want)
		}
	}
}

// want returns a description of the mismatch, or "" when got equals w.
func want[T comparable](name string, got, w T) string {
	if got == w {
		return ""
	}
	return fmt.Sprintf("%s: got %v, want %v; ", name, got, w)
}

func TestLoadWithEnvFileErrors(t *testing.T) {
	path := writeFile(t, "colour: red\nhttp:\n  addr: 5000\n")
	_, warnings, err := LoadWithEnv(path, []string{"REGISTRY_HTTP_ADDR=:6000"})
	// The file's addr has no port, but validation runs only once the
	// environment has replaced it.
	if err != nil {
		t.Fatalf("err = %v", err)
	}
	if !slices.Equal(warnings, []string{"unknown key colour; ignored (" + path + ":1)"}) {
		t.Errorf("warnings = %q", warnings)
	}

	bad := writeFile(t, "storage:\n  maintenance:\n    uploadpurging:\n      age: 10\n")
	_, _, err = LoadWithEnv(bad, nil)
	if want := "config: storage.maintenance.uploadpurging.age: 10 has no unit; write a duration such as 168h or 30m (" + bad + ":4)"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
	if _, _, err := LoadWithEnv(bad+".missing", nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}
