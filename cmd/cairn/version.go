package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
)

const versionUsage = `usage: cairn version

Prints cairn's version, the commit it was built from (its time, and whether
the work tree had uncommitted changes), the Go toolchain and the platform
(dedup's byte-exact rebuilds depend on the toolchain). Reads no configuration.

The go command stamps the version and commit into every build made in a git
checkout. A build without VCS information (a source archive, -buildvcs=false)
can be given them:
  go build -ldflags "-X main.version=v1.2.3 -X main.commit=SHA -X main.commitTime=RFC3339" ./cmd/cairn`

// Set with -ldflags -X for builds that carry no VCS information; a value
// given this way wins over the stamped one, so a release pipeline says
// what it built even from an archive. modified is "true" or "false".
var (
	version    string
	commit     string
	commitTime string
	modified   string
)

// buildInfo is what a binary knows about its own build.
type buildInfo struct {
	Version  string // module version (a tag, or a pseudo-version with +dirty), or "devel"
	Commit   string // full VCS revision; "" when unknown
	Time     string // commit time, RFC 3339; "" when unknown
	Modified bool   // built from a work tree with uncommitted changes
	Go       string
	Platform string
}

// readBuildInfo reads the stamps the go command put in the binary, then the
// -X overrides.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: "devel", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		// "(devel)" is what go run and builds outside VCS report.
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if commit != "" {
		b.Commit = commit
	}
	if commitTime != "" {
		b.Time = commitTime
	}
	if m, err := strconv.ParseBool(modified); err == nil {
		b.Modified = m
	}
	return b
}

// versionString names the build on one line, for logs and traces.
func versionString() string {
	b := readBuildInfo()
	rev := ""
	if b.Commit != "" {
		rev = " " + b.Commit[:min(12, len(b.Commit))]
		if b.Modified {
			rev += "-dirty"
		}
	}
	return fmt.Sprintf("cairn %s%s %s %s", b.Version, rev, b.Go, b.Platform)
}

func runVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cairn version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if done, err := parseFlags(fs, args, "version", versionUsage, stdout); done || err != nil {
		return err
	}
	b := readBuildInfo()
	fmt.Fprintf(stdout, "cairn %s\n", b.Version)
	if b.Commit == "" {
		fmt.Fprintln(stdout, "commit:   unknown (built without VCS information)")
	} else {
		fmt.Fprintf(stdout, "commit:   %s\n", b.Commit)
		if b.Time != "" {
			fmt.Fprintf(stdout, "time:     %s\n", b.Time)
		}
		if b.Modified {
			fmt.Fprintln(stdout, "modified: yes (built with uncommitted changes)")
		} else {
			fmt.Fprintln(stdout, "modified: no")
		}
	}
	fmt.Fprintf(stdout, "go:       %s %s\n", b.Go, b.Platform)
	return nil
}
