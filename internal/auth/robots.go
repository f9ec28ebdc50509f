package auth

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/notify"
)

// Robot accounts (API keys): a named secret scoped to repository patterns
// and actions, with an expiry, given as the password of the user
// RobotPrefix+name (docker login -u 'robot$ci'). The file holds only the
// SHA-256 of each secret: secrets are 256 random bits, so a fast hash
// resists guessing as well as bcrypt would, and costs microseconds per
// request instead of milliseconds.
//
// Life of a key: `cairn robot create` or the web page's form, both through
// CreateRobot, adds it to the file (rewritten aside and renamed into
// place, under a lock file so that two writers do not lose each other's
// change) and shows the secret once; the serving process notices the new
// file on the next login (one stat per use, see Robots) and accepts the
// key; `cairn robot revoke` or the page, through RevokeRobot, removes it
// and the next request, with the key or with a token issued for it, is
// refused. A token names the key's ID, new at each creation, so a key
// created again under a revoked name does not revive the old key's tokens.

// RobotPrefix starts every robot's user name.
const RobotPrefix = "robot$"

// robotSecretPrefix marks secrets so that secret scanners can find leaked
// ones.
const robotSecretPrefix = "cairn_rk_"

// Robot is one robot account as the file keeps it.
type Robot struct {
	Name string `json:"name"`
	// ID is new at each creation; tokens issued for the key name it.
	ID string `json:"id"`
	// Hash is "sha256:<hex>" of the secret.
	Hash    string       `json:"hash"`
	Scopes  []RobotScope `json:"scopes"`
	Created time.Time    `json:"created"`
	// Expires is when the key stops working; zero for never.
	Expires time.Time `json:"expires,omitzero"`

	patterns []*regexp.Regexp // Scopes' patterns, compiled
	hash     []byte           // Hash, decoded
}

// RobotScope gives actions (pull, push, delete, *) in the repositories a
// pattern matches ("*" within a path segment, "**" across, as in access
// control).
type RobotScope struct {
	Repositories string   `json:"repositories"`
	Actions      []string `json:"actions"`
}

// User is the user name the robot logs in with.
func (r *Robot) User() string { return RobotPrefix + r.Name }

// Expired reports whether the key no longer works at now.
func (r *Robot) Expired(now time.Time) bool { return !r.Expires.IsZero() && !now.Before(r.Expires) }

// compile checks r and prepares it for lookups.
func (r *Robot) compile() error {
	if err := CheckRobotName(r.Name); err != nil {
		return err
	}
	if r.ID == "" {
		return fmt.Errorf("robot %q: no id", r.Name)
	}
	alg, hx, ok := strings.Cut(r.Hash, ":")
	h, err := hex.DecodeString(hx)
	if !ok || alg != "sha256" || err != nil || len(h) != sha256.Size {
		return fmt.Errorf("robot %q: hash is not sha256:<64 hex digits>", r.Name)
	}
	r.hash = h
	r.patterns = r.patterns[:0]
	for _, s := range r.Scopes {
		re, err := layout.RepoPattern(s.Repositories)
		if err != nil {
			return fmt.Errorf("robot %q: %w", r.Name, err)
		}
		if len(s.Actions) == 0 {
			return fmt.Errorf("robot %q: scope %q gives no action", r.Name, s.Repositories)
		}
		if err := checkActions(fmt.Sprintf("robot %q scope %q", r.Name, s.Repositories), s.Actions); err != nil {
			return err
		}
		r.patterns = append(r.patterns, re)
	}
	return nil
}

// ParseRobotScope reads "PATTERN:ACTIONS" (team/**:pull,push).
func ParseRobotScope(s string) (RobotScope, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return RobotScope{}, fmt.Errorf("scope %q: want PATTERN:ACTIONS (team/**:pull,push)", s)
	}
	sc := RobotScope{Repositories: s[:i], Actions: strings.Split(s[i+1:], ",")}
	if _, err := layout.RepoPattern(sc.Repositories); err != nil {
		return RobotScope{}, err
	}
	if err := checkActions(fmt.Sprintf("scope %q", s), sc.Actions); err != nil {
		return RobotScope{}, err
	}
	return sc, nil
}

// String renders s as ParseRobotScope reads it.
func (s RobotScope) String() string { return s.Repositories + ":" + strings.Join(s.Actions, ",") }

var robotName = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*$`)

// CheckRobotName refuses names that would not read well as a user name.
func CheckRobotName(name string) error {
	if len(name) > 64 || !robotName.MatchString(name) {
		return fmt.Errorf("robot name %q: want 1 to 64 lower-case letters and digits, separated by '.', '_' or '-'", name)
	}
	return nil
}

// allows reports whether one of the robot's scopes gives a. Robots never
// list the catalog: it would name repositories outside their scopes.
func (r *Robot) allows(a Access) bool {
	if a.Type != TypeRepository {
		return false
	}
	for i, re := range r.patterns {
		if slicesAllow(r.Scopes[i].Actions, a.Action) && re.MatchString(a.Name) {
			return true
		}
	}
	return false
}

// pullsEverywhere reports a scope that pulls from every repository.
func (r *Robot) pullsEverywhere() bool {
	for _, s := range r.Scopes {
		if s.Repositories == "**" && slicesAllow(s.Actions, ActionPull) {
			return true
		}
	}
	return false
}

// NewRobotSecret returns a new secret and the hash the file keeps of it.
func NewRobotSecret() (secret, hash string) {
	b := make([]byte, 32)
	rand.Read(b)
	secret = robotSecretPrefix + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(secret))
	return secret, "sha256:" + hex.EncodeToString(sum[:])
}

// NewRobotID returns a fresh robot ID.
func NewRobotID() string { return strings.ToLower(rand.Text()) }

// robotFile is the file's form.
type robotFile struct {
	Version int     `json:"version"`
	Robots  []Robot `json:"robots"`
}

// ReadRobots reads the robot file at path; a missing file holds none.
func ReadRobots(path string) ([]Robot, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f robotFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", path, f.Version)
	}
	seen := make(map[string]bool, len(f.Robots))
	for i := range f.Robots {
		if err := f.Robots[i].compile(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if n := f.Robots[i].Name; seen[n] {
			return nil, fmt.Errorf("%s: robot %q given twice", path, n)
		}
		seen[f.Robots[i].Name] = true
	}
	return f.Robots, nil
}

// UpdateRobots changes the robot file at path with edit, holding a lock
// file beside it so that concurrent updates apply one after the other. The
// new file is written aside, synced and renamed into place: a reader sees
// the old file or the new one, never a part.
func UpdateRobots(path string, edit func([]Robot) ([]Robot, error)) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	robots, err := ReadRobots(path)
	if err != nil {
		return err
	}
	if robots, err = edit(robots); err != nil {
		return err
	}
	for i := range robots {
		if err := robots[i].compile(); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(robotFile{Version: 1, Robots: robots}, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(data, '\n'))
}

// writeAtomic replaces path with data: written aside, synced, renamed, and
// the directory synced so that the rename survives a crash.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Robots checks robot keys against the robot file, which it reads again
// whenever the file changed: every use stats the file (a microsecond or
// two), so a revocation applies from the next request on, with no reload
// and no restart. A file that does not read refuses every key until it is
// fixed: a torn revocation must not leave the revoked key working.
type Robots struct {
	path  string
	dummy []byte // compared when the name is unknown (see check)

	mu    sync.Mutex
	stamp fileID
	set   robotSet
}

type robotSet struct {
	byName map[string]*Robot
	byID   map[string]*Robot
	err    error
}

// fileID tells one version of a file from another: UpdateRobots renames a
// new file into place, which gives a new inode (the old one is still held
// while the new is written), and an edit in place a new size or
// modification time.
type fileID struct {
	exists         bool
	ino, size, mod int64
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileID{}, nil
	}
	if err != nil {
		return fileID{}, err
	}
	id := fileID{exists: true, size: fi.Size(), mod: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(st.Ino)
	}
	return id, nil
}

// NewRobots returns the robot keys of the file at path (which need not
// exist yet).
func NewRobots(path string) *Robots {
	dummy := sha256.Sum256([]byte(rand.Text()))
	r := &Robots{path: path, dummy: dummy[:]}
	r.stamp.ino = -1 // read at first use
	return r
}

// current returns the robots of the file as it is now.
func (r *Robots) current() robotSet {
	id, err := statID(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		return robotSet{err: fmt.Errorf("robots: %w", err)}
	}
	if id == r.stamp {
		return r.set
	}
	robots, err := ReadRobots(r.path)
	set := robotSet{byName: map[string]*Robot{}, byID: map[string]*Robot{}, err: err}
	for i := range robots {
		rb := &robots[i]
		set.byName[rb.Name], set.byID[rb.ID] = rb, rb
	}
	r.stamp, r.set = id, set
	return set
}

// check returns the robot whose user name and secret these are. It costs
// the same whether the name is known or not, and whether the key is valid,
// expired or wrong: one SHA-256 and one constant-time comparison.
func (r *Robots) check(user, secret string, now time.Time) (*Robot, error) {
	set := r.current()
	name := strings.TrimPrefix(user, RobotPrefix)
	rb := set.byName[name]
	want := r.dummy
	if rb != nil {
		want = rb.hash
	}
	sum := sha256.Sum256([]byte(secret))
	match := subtle.ConstantTimeCompare(sum[:], want) == 1
	switch {
	case set.err != nil:
		return nil, set.err
	case rb == nil || !match:
		return nil, errors.New("unknown robot or wrong key")
	case rb.Expired(now):
		return nil, fmt.Errorf("robot key expired at %s", rb.Expires.Format(time.RFC3339))
	}
	return rb, nil
}

// valid reports whether the key with this ID still works at now; tokens
// issued for it are refused as soon as it does not.
func (r *Robots) valid(id string, now time.Time) (*Robot, error) {
	set := r.current()
	if set.err != nil {
		return nil, set.err
	}
	rb := set.byID[id]
	switch {
	case rb == nil:
		return nil, errors.New("robot key revoked")
	case rb.Expired(now):
		return nil, errors.New("robot key expired")
	}
	return rb, nil
}

// SortRobots orders robots by name, for listings.
func SortRobots(robots []Robot) {
	slices.SortFunc(robots, func(a, b Robot) int { return strings.Compare(a.Name, b.Name) })
}

// Creating and revoking keys, written once for `cairn robot` and the web
// page: the same checks, the same file update and the same audit record,
// whoever asks.

// ErrRobotRequest marks a create or revoke refused for what was asked (a
// name, scope or expiry that does not read, a name in use, an unknown
// name): the file was not written, and the message says why.
var ErrRobotRequest = errors.New("robot key request refused")

// DefaultRobotLifetime is the expiry of a key when none is given.
const DefaultRobotLifetime = "90d"

// RobotRequest is a key to create, as typed on the command line or in the
// page's form.
type RobotRequest struct {
	Name   string
	Scopes []string // PATTERN:ACTIONS (team/**:pull,push), at least one
	// Expires is "never", "<n>d" or a Go duration; "" is
	// DefaultRobotLifetime.
	Expires string
}

// ParseRobotLifetime reads "never", "<n>d" or a positive Go duration; 0
// means never.
func ParseRobotLifetime(s string) (time.Duration, error) {
	if s == "never" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, fmt.Errorf("expiry %q: want a positive number of days", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("expiry %q: want 90d, a positive Go duration or never", s)
	}
	return d, nil
}

// CreateRobot checks req, adds the key to the file at path and returns it
// with its secret, which exists nowhere else: the caller shows it once. A
// name in use is refused (revoke it first), so that replacing a key is
// always a visible step. Refusals of req wrap ErrRobotRequest.
func CreateRobot(path string, req RobotRequest, now time.Time) (Robot, string, error) {
	if err := CheckRobotName(req.Name); err != nil {
		return Robot{}, "", fmt.Errorf("%w: %w", ErrRobotRequest, err)
	}
	if len(req.Scopes) == 0 {
		return Robot{}, "", fmt.Errorf("%w: give at least one scope PATTERN:ACTIONS (team/**:pull,push)", ErrRobotRequest)
	}
	scopes := make([]RobotScope, 0, len(req.Scopes))
	for _, s := range req.Scopes {
		sc, err := ParseRobotScope(s)
		if err != nil {
			return Robot{}, "", fmt.Errorf("%w: %w", ErrRobotRequest, err)
		}
		scopes = append(scopes, sc)
	}
	lifetime, err := ParseRobotLifetime(cmp.Or(req.Expires, DefaultRobotLifetime))
	if err != nil {
		return Robot{}, "", fmt.Errorf("%w: %w", ErrRobotRequest, err)
	}
	secret, hash := NewRobotSecret()
	rb := Robot{Name: req.Name, ID: NewRobotID(), Hash: hash, Scopes: scopes, Created: now.UTC().Truncate(time.Second)}
	if lifetime > 0 {
		rb.Expires = now.Add(lifetime).UTC().Truncate(time.Second)
	}
	err = UpdateRobots(path, func(robots []Robot) ([]Robot, error) {
		if slices.ContainsFunc(robots, func(r Robot) bool { return r.Name == req.Name }) {
			return nil, fmt.Errorf("%w: robot %q exists (revoke it first)", ErrRobotRequest, req.Name)
		}
		return append(robots, rb), nil
	})
	if err != nil {
		return Robot{}, "", fmt.Errorf("robot create: %s: %w", path, err)
	}
	return rb, secret, nil
}

// RevokeRobot removes the key name from the file at path and returns it.
// An unknown name wraps ErrRobotRequest.
func RevokeRobot(path, name string) (Robot, error) {
	var gone Robot
	err := UpdateRobots(path, func(robots []Robot) ([]Robot, error) {
		i := slices.IndexFunc(robots, func(r Robot) bool { return r.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: no robot %q", ErrRobotRequest, name)
		}
		gone = robots[i]
		return slices.Delete(robots, i, i+1), nil
	})
	if err != nil {
		return Robot{}, fmt.Errorf("robot revoke: %s: %w", path, err)
	}
	return gone, nil
}

// RobotChange is the audit record of one create or revoke, the same from
// `cairn robot` and from the web page: one audit line, and with
// auth.audit.events one notification event.
type RobotChange struct {
	Action string // notify.ActionRobotCreate or notify.ActionRobotRevoke
	Robot  Robot
	By     string // who asked: the operator's login, or the page's admin
	Via    string // "cli" or "web"
	File   string
}

// Audit writes the change's audit line (never the secret, which the
// change does not hold).
func (c RobotChange) Audit(log *slog.Logger) {
	attrs := []any{"action", c.Action, "user", c.Robot.User(), "robot", true, "by", c.By, "via", c.Via}
	if c.Action == notify.ActionRobotCreate {
		attrs = append(attrs, "expires", c.Robot.ExpiryString(), "scopes", ScopeList(c.Robot.Scopes))
	}
	log.Info("audit", append(attrs, "file", c.File)...)
}

// Event is the change's notification event: its actor is the robot.
func (c RobotChange) Event() notify.Event {
	return notify.Event{Action: c.Action, Actor: notify.Actor{Name: c.Robot.User()}}
}

// ExpiryString is when the key expires (RFC 3339), or "never".
func (r *Robot) ExpiryString() string {
	if r.Expires.IsZero() {
		return "never"
	}
	return r.Expires.Format(time.RFC3339)
}

// ScopeList renders scopes as `cairn robot create --scope` reads them,
// separated by spaces.
func ScopeList(scopes []RobotScope) string {
	parts := make([]string, len(scopes))
	for i, s := range scopes {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// ManagesRobots reports whether the grant may create and revoke robot
// keys: a caller the access-control admin policy names, with every action
// (a key can give push and delete, so an admin limited to pull must not
// mint one); without access control, any authenticated user, who may do
// everything already. Never a robot, nor an anonymous caller.
func (g Grant) ManagesRobots() bool {
	if g.Subject == "" || g.robot != nil || g.robotID != "" || strings.HasPrefix(g.Subject, RobotPrefix) {
		return false
	}
	if g.acl != nil {
		if !g.acl.authenticated || !g.acl.admin() {
			return false
		}
		for _, a := range []string{ActionPull, ActionPush, ActionDelete} {
			if !slicesAllow(g.acl.acl.admin.Actions, a) {
				return false
			}
		}
		return true
	}
	return g.all
}
