package auth

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Htpasswd authorizes HTTP Basic credentials against an htpasswd file of
// bcrypt hashes. Every user it knows may do everything, as in distribution.
type Htpasswd struct {
	realm string
	users map[string][]byte // user -> bcrypt hash
	// dummy is compared when the user is unknown, so that an unknown user
	// costs one comparison at the cost of a known user's wrong password
	// and user names cannot be probed by timing (see dummyCost).
	dummy []byte
	cache *verifiedCache
	// slots bounds the bcrypt comparisons running at once: each burns
	// milliseconds of CPU by design, and a flood of bad logins must leave
	// CPUs to the registry. Credentials that passed recently skip it
	// through the cache, so authenticated clients do not queue behind a
	// flood.
	slots chan struct{}
	// compare is bcrypt.CompareHashAndPassword; tests observe it.
	compare func(hash, pass []byte) error
}

// LoadHtpasswd reads the htpasswd file at path. The file must exist and
// hold only bcrypt entries ("user:$2y$..."): other hash types (MD5 apr1,
// SHA-1, crypt, plain text) are refused, naming the line.
func LoadHtpasswd(realm, path string) (*Htpasswd, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	users, err := ParseHtpasswd(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewHtpasswd(realm, users)
}

// NewHtpasswd returns an Htpasswd over users (user -> bcrypt hash). At
// most half the CPUs (at least one) compare passwords at once.
func NewHtpasswd(realm string, users map[string][]byte) (*Htpasswd, error) {
	cost, err := dummyCost(users)
	if err != nil {
		return nil, err
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), cost)
	if err != nil {
		return nil, fmt.Errorf("dummy hash at cost %d: %w", cost, err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	return &Htpasswd{
		realm:   realm,
		users:   users,
		dummy:   dummy,
		cache:   newVerifiedCache(secret),
		slots:   make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
		compare: bcrypt.CompareHashAndPassword,
	}, nil
}

// dummyCost returns the bcrypt cost for the dummy hash: the cost most
// users' hashes have. bcrypt's time doubles with each step of cost, so a
// dummy at another cost than a user's tells that user apart from unknown
// names (a fixed cost 10 against the cost 5 of htpasswd -B made unknown
// users ~22x slower). One cost cannot match every user of a mixed file;
// the most common one hides the most users. A tie takes the higher cost,
// the one files move to as passwords are reset at a raised cost.
func dummyCost(users map[string][]byte) (int, error) {
	count := make(map[int]int)
	best := bcrypt.DefaultCost // no users: nobody to look like
	for user, hash := range users {
		c, err := bcrypt.Cost(hash)
		if err != nil {
			return 0, fmt.Errorf("user %q: %w", user, err)
		}
		count[c]++
		if n, m := count[c], count[best]; n > m || n == m && c > best {
			best = c
		}
	}
	return best, nil
}

// ParseHtpasswd reads htpasswd lines "user:hash". Blank lines and lines
// starting with # are skipped. Every hash must be bcrypt.
func ParseHtpasswd(r io.Reader) (map[string][]byte, error) {
	users := make(map[string][]byte)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("line %d: not of the form user:hash", n)
		}
		if _, dup := users[user]; dup {
			return nil, fmt.Errorf("line %d: user %q given twice", n, user)
		}
		if kind := hashKind(hash); kind != "bcrypt" {
			return nil, fmt.Errorf("line %d: user %q has a %s hash; cairn accepts only bcrypt ($2a$, $2b$, $2y$): create it with htpasswd -B", n, user, kind)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("line %d: user %q: malformed bcrypt hash: %w", n, user, err)
		}
		users[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(users) == 0 {
		return nil, errors.New("no users: nobody could log in")
	}
	return users, nil
}

// hashKind names the hash type of an htpasswd entry.
func hashKind(h string) string {
	switch {
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		return "bcrypt"
	case strings.HasPrefix(h, "$apr1$"):
		return "MD5 (apr1)"
	case strings.HasPrefix(h, "$1$"):
		return "MD5-crypt"
	case strings.HasPrefix(h, "{SHA}"):
		return "SHA-1"
	case strings.HasPrefix(h, "$5$"):
		return "SHA-256-crypt"
	case strings.HasPrefix(h, "$6$"):
		return "SHA-512-crypt"
	case strings.HasPrefix(h, "$"):
		return "unknown"
	}
	return "crypt or plain-text"
}

// Authorize implements Authorizer.
func (h *Htpasswd) Authorize(r *http.Request, need []Access) (Grant, error) {
	user, pass, ok := r.BasicAuth()
	if !ok || user == "" && pass == "" {
		// containers/image (skopeo, podman) answers a Basic challenge
		// with empty credentials when it has none: that names nobody.
		return Grant{}, h.challenge(ErrNoCredentials, need)
	}
	ok, err := h.verify(r.Context(), user, pass)
	if err != nil {
		// The request ended while it waited for a comparison (the client
		// left, or the server is stopping). Nothing was checked, so it is
		// refused; the wait came before the user was looked up, so this
		// refusal tells no more than a wrong password does.
		return Grant{}, h.challenge(fmt.Errorf("%w: user %q: not checked: %w", ErrInvalidCredentials, user, err), need)
	}
	if !ok {
		return Grant{}, h.challenge(fmt.Errorf("%w: user %q", ErrInvalidCredentials, user), need)
	}
	return Grant{Subject: user, all: true}, nil
}

func (h *Htpasswd) challenge(err error, need []Access) *Challenge {
	return &Challenge{err: err, header: fmt.Sprintf("Basic realm=%q", h.realm), need: need}
}

// verify reports whether pass is user's password. Credentials that passed
// recently are answered from the cache; any others wait for a comparison
// slot, or for ctx to end (the error), and then cost exactly one bcrypt
// comparison, against the dummy hash when the user is unknown.
func (h *Htpasswd) verify(ctx context.Context, user, pass string) (bool, error) {
	key := h.cache.key(user, pass)
	if h.cache.has(key) {
		return true, nil
	}
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
	defer func() { <-h.slots }()
	// Requests that queued with the same new credentials (a client's
	// first parallel requests) pay for one comparison, not one each.
	if h.cache.has(key) {
		return true, nil
	}
	hash, known := h.users[user]
	if !known {
		hash = h.dummy
	}
	if h.compare(hash, []byte(pass)) != nil || !known {
		return false, nil
	}
	h.cache.add(key)
	return true, nil
}

// verifiedCache remembers credentials that passed bcrypt recently, so that
// a pull of many blobs costs one bcrypt comparison (tens of milliseconds by
// design), not one per request. It holds keyed hashes (HMAC with a
// per-process secret) of user and password, never the password itself.
// Failures are not cached: guessing keeps paying bcrypt's price.
type verifiedCache struct {
	secret []byte
	mu     sync.Mutex
	until  map[[32]byte]time.Time
}

const (
	verifiedTTL = 5 * time.Minute
	verifiedMax = 4096
)

func newVerifiedCache(secret []byte) *verifiedCache {
	return &verifiedCache{secret: secret, until: make(map[[32]byte]time.Time)}
}

func (c *verifiedCache) key(user, pass string) [32]byte {
	m := hmac.New(sha256.New, c.secret)
	io.WriteString(m, user)
	m.Write([]byte{0})
	io.WriteString(m, pass)
	var k [32]byte
	m.Sum(k[:0])
	return k
}

func (c *verifiedCache) has(k [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.until[k]
	if ok && time.Now().After(t) {
		delete(c.until, k)
		return false
	}
	return ok
}

func (c *verifiedCache) add(k [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if len(c.until) >= verifiedMax {
		for k, t := range c.until {
			if now.After(t) {
				delete(c.until, k)
			}
		}
		if len(c.until) >= verifiedMax {
			clear(c.until)
		}
	}
	c.until[k] = now.Add(verifiedTTL)
}
