package dataset

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// pkg is one Debian binary package at one version.
type pkg struct {
	Name, Version, Arch string
}

// debFile is the name apt-get download gives the package's .deb (an epoch's
// colon is escaped as %3a).
func (p pkg) debFile() string {
	return p.Name + "_" + strings.ReplaceAll(p.Version, ":", "%3a") + "_" + p.Arch + ".deb"
}

// apt runs the machine's apt tools against its configured sources. Every
// query pretends that nothing is installed (an empty dpkg status), so the
// host's own packages never leak into an image.
type apt struct {
	cache string // holds debs/, fsys/, ctrl/ and queries/
}

// aptBase are the options of every apt call: an empty dpkg status, no
// recommends, and no lock on the host's apt state (we only read it).
var aptBase = []string{
	"-q",
	"-o", "Dir::State::status=/dev/null",
	"-o", "APT::Install-Recommends=false",
	"-o", "Debug::NoLocking=1",
}

// checkTools reports which of the tools the builder needs are missing.
func checkTools() error {
	var missing []string
	for _, t := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found", ErrNoApt, strings.Join(missing, ", "))
	}
	return nil
}

func runTool(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dataset: %s %s: %w: %s", name, strings.Join(args[:min(len(args), 12)], " "), err, lastLine(stderr.String()))
	}
	return out, nil
}

// query runs a read-only apt query, memoised in the cache dir under the
// state of apt's package lists: apt needs a second or two per query, and the
// answer changes only when the lists do (apt-get update).
func (a *apt) query(ctx context.Context, name string, args ...string) ([]byte, error) {
	stamp, ok := listsStamp()
	if !ok {
		return runTool(ctx, "", name, args...)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", stamp, name, strings.Join(args, "\x00"))
	path := filepath.Join(a.cache, "queries", hex.EncodeToString(h.Sum(nil)[:16]))
	if out, err := os.ReadFile(path); err == nil {
		return out, nil
	}
	out, err := runTool(ctx, "", name, args...)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(path, out); err != nil {
		return nil, err
	}
	return out, nil
}

// listsStamp describes apt's package lists (names, sizes, mtimes), or
// reports false when they cannot be read.
func listsStamp() (string, bool) {
	dir := "/var/lib/apt/lists"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	var b strings.Builder
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		fmt.Fprintf(&b, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), b.Len() > 0
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	return nil
}

// lastLine returns the last non-warning line of tool output, which is where
// apt and dpkg put the reason of a failure.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "W:") {
			return l
		}
	}
	return "(no output)"
}

// resolve returns the packages apt would install for names on an empty
// system: names and their dependency closure, without recommends.
func (a *apt) resolve(ctx context.Context, names []string) ([]pkg, error) {
	req := slices.Sorted(slices.Values(names))
	args := append(slices.Clone(aptBase), "-s", "install")
	out, err := a.query(ctx, "apt-get", append(args, req...)...)
	if err != nil {
		return nil, err
	}
	return parseSimulation(out)
}

// parseSimulation reads the "Inst name (version release [arch])" lines of
// apt-get -s install, sorted by name.
func parseSimulation(out []byte) ([]pkg, error) {
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "Inst ") {
			continue
		}
		f := strings.Fields(line)
		open := strings.IndexByte(line, '(')
		lb, rb := strings.LastIndexByte(line, '['), strings.LastIndexByte(line, ']')
		// A trailing "[]" lists broken packages; the arch bracket is the one
		// inside the parentheses.
		if cl := strings.IndexByte(line, ')'); cl > 0 {
			lb, rb = strings.LastIndexByte(line[:cl], '['), strings.LastIndexByte(line[:cl], ']')
		}
		if len(f) < 3 || open < 0 || lb < 0 || rb < lb {
			return nil, fmt.Errorf("dataset: unexpected apt-get output line %q", line)
		}
		ver := strings.Fields(line[open+1:])[0]
		pkgs = append(pkgs, pkg{Name: f[1], Version: ver, Arch: line[lb+1 : rb]})
	}
	if len(pkgs) == 0 {
		return nil, errors.New("dataset: apt-get -s install selected no packages")
	}
	slices.SortFunc(pkgs, func(x, y pkg) int { return strings.Compare(x.Name, y.Name) })
	return pkgs, nil
}

// candidates returns apt's candidate version of each named package, with
// no dependencies added, sorted by name.
func (a *apt) candidates(ctx context.Context, names []string) ([]pkg, error) {
	args := append(slices.Clone(aptBase), "show", "--no-all-versions")
	out, err := a.query(ctx, "apt-cache", append(args, names...)...)
	if err != nil {
		return nil, err
	}
	var pkgs []pkg
	var cur pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		switch {
		case !ok:
		case k == "Package":
			cur = pkg{Name: v}
		case k == "Version":
			cur.Version = v
		case k == "Architecture":
			cur.Arch = v
			pkgs = append(pkgs, cur)
		}
	}
	if len(pkgs) != len(names) {
		return nil, fmt.Errorf("dataset: apt-cache show found %d of %d packages", len(pkgs), len(names))
	}
	slices.SortFunc(pkgs, func(x, y pkg) int { return strings.Compare(x.Name, y.Name) })
	return pkgs, nil
}

// olderVersions maps each package name to the newest version older than
// its candidate that the sources still offer (an image built before the
// latest stable or security update). Packages with one version are absent.
func (a *apt) olderVersions(ctx context.Context, names []string) (map[string]string, error) {
	args := append(slices.Clone(aptBase), "policy")
	out, err := a.query(ctx, "apt-cache", append(args, names...)...)
	if err != nil {
		return nil, err
	}
	return parsePolicy(out), nil
}

// parsePolicy reads apt-cache policy output. Its version table lists
// versions newest first, each followed by the sources offering it.
func parsePolicy(out []byte) map[string]string {
	older := make(map[string]string)
	var name, candidate string
	var versions []string
	flush := func() {
		if i := slices.Index(versions, candidate); i >= 0 && i+1 < len(versions) {
			older[name] = versions[i+1]
		}
		versions = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case line[0] != ' ' && strings.HasSuffix(line, ":"):
			flush()
			name, candidate = strings.TrimSuffix(line, ":"), ""
		case strings.HasPrefix(line, "  Candidate: "):
			candidate = strings.TrimSpace(strings.TrimPrefix(line, "  Candidate: "))
		case strings.HasPrefix(line, " *** "), strings.HasPrefix(line, "     ") && !strings.HasPrefix(line, "      "):
			// Version lines are indented five columns (or marked ***);
			// source lines under them eight.
			if f := strings.Fields(strings.TrimPrefix(line, " *** ")); len(f) > 0 {
				versions = append(versions, f[0])
			}
		}
	}
	flush()
	return older
}

// fetch makes sure every package's .deb, data tar and control tar are in the
// cache, downloading missing debs in one apt-get call. Files appear under
// their final names only when complete (rename), so concurrent builds that
// share the cache never see a partial file.
func (a *apt) fetch(ctx context.Context, pkgs []pkg) error {
	debs := filepath.Join(a.cache, "debs")
	for _, d := range []string{debs, filepath.Join(a.cache, "fsys"), filepath.Join(a.cache, "ctrl")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("dataset: %w", err)
		}
	}
	var want []string
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(debs, p.debFile())); err != nil {
			want = append(want, p.Name+"="+p.Version)
		}
	}
	if len(want) > 0 {
		tmp, err := os.MkdirTemp(a.cache, "download-")
		if err != nil {
			return fmt.Errorf("dataset: %w", err)
		}
		defer os.RemoveAll(tmp)
		// apt drops privileges to _apt for downloads; a private temp dir
		// only makes it warn, so open it up.
		_ = os.Chmod(tmp, 0o755)
		args := append(slices.Clone(aptBase), "download")
		if _, err := runTool(ctx, tmp, "apt-get", append(args, want...)...); err != nil {
			return err
		}
		for _, p := range pkgs {
			src := filepath.Join(tmp, p.debFile())
			if _, err := os.Stat(src); err != nil {
				continue // was already cached
			}
			if err := os.Rename(src, filepath.Join(debs, p.debFile())); err != nil {
				return fmt.Errorf("dataset: %w", err)
			}
		}
	}
	return a.extract(ctx, pkgs)
}

// extract writes each deb's data tar (dpkg-deb --fsys-tarfile: original
// owners, modes, links and mtimes) and control tar next to it, in parallel.
func (a *apt) extract(ctx context.Context, pkgs []pkg) error {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	errs := make([]error, len(pkgs))
	for i, p := range pkgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			deb := filepath.Join(a.cache, "debs", p.debFile())
			if _, err := os.Stat(deb); err != nil {
				errs[i] = fmt.Errorf("dataset: apt-get download did not produce %s", p.debFile())
				return
			}
			errs[i] = errors.Join(
				a.extractOne(ctx, deb, a.fsysPath(p), "--fsys-tarfile"),
				a.extractOne(ctx, deb, a.ctrlPath(p), "--ctrl-tarfile"))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *apt) fsysPath(p pkg) string { return filepath.Join(a.cache, "fsys", p.debFile()+".tar") }
func (a *apt) ctrlPath(p pkg) string { return filepath.Join(a.cache, "ctrl", p.debFile()+".tar") }

func (a *apt) extractOne(ctx context.Context, deb, dst, flag string) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".tmp-")
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	defer os.Remove(f.Name())
	cmd := exec.CommandContext(ctx, "dpkg-deb", flag, deb)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dataset: dpkg-deb %s %s: %w: %s", flag, filepath.Base(deb), err, lastLine(stderr.String()))
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	return nil
}
