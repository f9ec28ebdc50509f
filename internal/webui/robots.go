package webui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/notify"
)

// The robot keys page: admins list, create and revoke robot keys, through
// the same functions as `cairn robot` (auth.CreateRobot, auth.RevokeRobot,
// auth.RobotChange), so the checks, the file update, the audit line and
// the event are the CLI's. Who may: auth.Grant.ManagesRobots (the admin
// policy with every action; without access control, any authenticated
// user). Anonymous callers and listeners without authentication never.
//
// Forgery: the page changes things only on POST, and a POST must pass
// both net/http's cross-origin protection (Sec-Fetch-Site, else Origin
// against Host: a browser's cross-site request is refused whatever
// cookies it carries) and a form token, an HMAC under a key drawn when
// the handler is built of the caller's subject and credentials (the
// Authorization header, the session cookie). Another site can neither
// read the token (the page is same-origin and no-store) nor compute it,
// and a token stops working with the credentials it was made for. The key
// is per process: a form loaded from one node and sent to another behind
// a balancer is refused, and reloading the page gives a good one.

// RobotKeys is where the page keeps robot keys and tells of changes.
type RobotKeys struct {
	Path string // the robot file (auth.robots.path)
	// Log receives the audit lines; Events (nil: none) the events, as
	// with auth.audit.events.
	Log    *slog.Logger
	Events interface{ Notify(notify.Event) }
}

// csrfField names the form token in the page's forms.
const csrfField = "csrf"

// maxRobotForm bounds a form's body: a name, a few scopes, an expiry.
const maxRobotForm = 64 << 10

// csrf makes and checks the page's form tokens.
type csrf struct {
	key    []byte
	origin *http.CrossOriginProtection
}

func newCSRF() csrf {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand)
	return csrf{key: key, origin: http.NewCrossOriginProtection()}
}

// token is the form token of r's caller, subject.
func (c csrf) token(r *http.Request, subject string) string {
	m := hmac.New(sha256.New, c.key)
	// Length-prefixed parts, so that no two callers' parts run together
	// alike.
	for _, part := range []string{"cairn robot keys form", subject, r.Header.Get("Authorization"), sessionCookie(r)} {
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		m.Write([]byte(part))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func sessionCookie(r *http.Request) string {
	if c, err := r.Cookie(auth.SessionCookie); err == nil {
		return c.Value
	}
	return ""
}

// check reports why r, a POST of subject's, is not the page's own form.
func (c csrf) check(r *http.Request, subject string) error {
	if err := c.origin.Check(r); err != nil {
		return err
	}
	got, err := base64.RawURLEncoding.DecodeString(r.PostFormValue(csrfField))
	want, _ := base64.RawURLEncoding.DecodeString(c.token(r, subject))
	if err != nil || !hmac.Equal(got, want) {
		return errors.New("the form's token is missing or not this session's: reload the page")
	}
	return nil
}

type robotsPage struct {
	Prefix string
	Visitor
	Off    bool // auth.robots is not configured
	Robots []robotRow
	Token  string // the forms' CSRF token
	// The outcome of a POST: an error, a message, a new key (shown once).
	Error, Message string
	Created        *createdKey
	Form           robotForm // the create form's values, kept on an error
}

type robotRow struct {
	Name, User, Expires string
	Scopes              []string // PATTERN:ACTIONS
	Created             time.Time
	Expired             bool
}

type createdKey struct{ User, Key, Expires string }

type robotForm struct{ Name, Scopes, Expires string }

// robotsAdmin authorizes a robot keys request; false means it answered
// the refusal. Every refusal but the login's is a 403 with the same
// words, whatever keys exist.
func (h *handler) robotsAdmin(w http.ResponseWriter, r *http.Request) (*auth.Grant, bool) {
	if h.Auth == nil {
		http.Error(w, "robot keys are managed only by authenticated admins; this listener has no authentication", http.StatusForbidden)
		return nil, false
	}
	g, ok := h.grant(w, r)
	if !ok {
		return nil, false
	}
	if g.Subject == "" {
		// Anonymous, where anyone may look at the registry: asked to log
		// in as for what only admins may do (the catalog), so that a
		// browser shows the login or the Basic prompt.
		if _, ok := h.grantFor(w, r, []auth.Access{{Type: auth.TypeRegistry, Name: "catalog", Action: auth.ActionAll}}); !ok {
			return nil, false
		}
	}
	if !g.ManagesRobots() {
		http.Error(w, "robot keys are managed only by admins", http.StatusForbidden)
		return nil, false
	}
	return g, true
}

func (h *handler) robotsGet(w http.ResponseWriter, r *http.Request) {
	g, ok := h.robotsAdmin(w, r)
	if !ok {
		return
	}
	h.renderRobots(w, r, g, http.StatusOK, robotsPage{Form: robotForm{Expires: auth.DefaultRobotLifetime}})
}

func (h *handler) robotsCreate(w http.ResponseWriter, r *http.Request) {
	g, ok := h.robotsPost(w, r)
	if !ok {
		return
	}
	form := robotForm{Name: strings.TrimSpace(r.PostFormValue("name")), Scopes: r.PostFormValue("scopes"), Expires: strings.TrimSpace(r.PostFormValue("expires"))}
	req := auth.RobotRequest{Name: form.Name, Scopes: strings.Fields(form.Scopes), Expires: form.Expires}
	rb, secret, err := auth.CreateRobot(h.Robots.Path, req, time.Now())
	if err != nil {
		h.robotsFailed(w, r, g, err, form)
		return
	}
	h.robotChanged(r, g, auth.RobotChange{Action: notify.ActionRobotCreate, Robot: rb})
	h.renderRobots(w, r, g, http.StatusOK, robotsPage{
		Created: &createdKey{User: rb.User(), Key: secret, Expires: rb.ExpiryString()},
		Form:    robotForm{Expires: auth.DefaultRobotLifetime},
	})
}

func (h *handler) robotsRevoke(w http.ResponseWriter, r *http.Request) {
	g, ok := h.robotsPost(w, r)
	if !ok {
		return
	}
	rb, err := auth.RevokeRobot(h.Robots.Path, r.PostFormValue("name"))
	if err != nil {
		h.robotsFailed(w, r, g, err, robotForm{Expires: auth.DefaultRobotLifetime})
		return
	}
	h.robotChanged(r, g, auth.RobotChange{Action: notify.ActionRobotRevoke, Robot: rb})
	h.renderRobots(w, r, g, http.StatusOK, robotsPage{
		Message: "Revoked " + rb.User() + ": the key and the tokens issued for it are refused from now on.",
		Form:    robotForm{Expires: auth.DefaultRobotLifetime},
	})
}

// robotsPost authorizes a POST: an admin, robot keys on, the page's own
// form. False means it answered the refusal, and nothing was written.
func (h *handler) robotsPost(w http.ResponseWriter, r *http.Request) (*auth.Grant, bool) {
	g, ok := h.robotsAdmin(w, r)
	if !ok {
		return nil, false
	}
	if h.Robots == nil {
		http.Error(w, "robot keys are off (auth.robots)", http.StatusNotFound)
		return nil, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRobotForm)
	if err := h.csrf.check(r, g.Subject); err != nil {
		http.Error(w, "refused: "+err.Error(), http.StatusForbidden)
		return nil, false
	}
	return g, true
}

// robotsFailed answers a refused create or revoke: the request's fault
// (400, its message on the page) or the file's (500).
func (h *handler) robotsFailed(w http.ResponseWriter, r *http.Request, g *auth.Grant, err error, form robotForm) {
	status := http.StatusBadRequest
	msg := strings.TrimPrefix(err.Error(), auth.ErrRobotRequest.Error()+": ")
	if !errors.Is(err, auth.ErrRobotRequest) {
		status, msg = http.StatusInternalServerError, "the robot file could not be changed; the server's log says why"
		h.Robots.Log.Error("web page: robot keys", "by", g.Subject, "err", err)
	}
	h.renderRobots(w, r, g, status, robotsPage{Error: msg, Form: form})
}

// robotChanged writes the audit line and sends the event, as `cairn
// robot` does.
func (h *handler) robotChanged(r *http.Request, g *auth.Grant, c auth.RobotChange) {
	c.By, c.Via, c.File = g.Subject, "web", h.Robots.Path
	c.Audit(h.Robots.Log)
	if h.Robots.Events != nil {
		h.Robots.Events.Notify(c.Event())
	}
}

func (h *handler) renderRobots(w http.ResponseWriter, r *http.Request, g *auth.Grant, status int, p robotsPage) {
	p.Prefix, p.Visitor = h.Prefix, h.visitor(g)
	if h.Robots == nil {
		p.Off = true
		renderStatus(w, status, "robots.html", p)
		return
	}
	p.Token = h.csrf.token(r, g.Subject)
	robots, err := auth.ReadRobots(h.Robots.Path)
	if err != nil {
		h.Robots.Log.Error("web page: reading robot keys", "err", err)
		http.Error(w, "the robot file does not read; the server's log says why", http.StatusInternalServerError)
		return
	}
	auth.SortRobots(robots)
	now := time.Now()
	for _, rb := range robots {
		row := robotRow{Name: rb.Name, User: rb.User(), Expires: rb.ExpiryString(), Created: rb.Created, Expired: rb.Expired(now)}
		for _, sc := range rb.Scopes {
			row.Scopes = append(row.Scopes, sc.String())
		}
		p.Robots = append(p.Robots, row)
	}
	renderStatus(w, status, "robots.html", p)
}
