package notify

import (
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// EnvelopeMediaType is the Content-Type of every notification request, as
// distribution sends it.
const EnvelopeMediaType = "application/vnd.docker.distribution.events.v2+json"

// Actions. Push, pull, delete and mount are distribution's; gc and dedup are
// cairn's own, which a receiver that does not know them can ignore (or an
// endpoint can drop with ignore.actions).
const (
	ActionPush   = "push"
	ActionPull   = "pull"
	ActionDelete = "delete"
	ActionMount  = "mount"
	// ActionGC: a garbage collection run finished; Event.Cairn.GC says
	// what it freed.
	ActionGC = "gc"
	// ActionDedup: a layer's intact copy was replaced by its recipe;
	// Target.Digest names the layer.
	ActionDedup = "dedup"
)

// Audit actions (auth.audit.events): Actor.Name is the user name given,
// Request the client's address and user agent; a login action's
// Event.Cairn.Login says how it came and which identity source proved
// (or refused) it.
const (
	// ActionLogin: credentials passed (not again for the same
	// credentials within minutes: a pull sends them with every request).
	ActionLogin = "login"
	// ActionLoginFailed: credentials were checked and failed.
	ActionLoginFailed = "login.failed"
	// ActionLoginHeld: an address that failed too often was answered 429.
	ActionLoginHeld = "login.held"
	// ActionRobotCreate and ActionRobotRevoke: `cairn robot` created or
	// revoked a robot key.
	ActionRobotCreate = "robot.create"
	ActionRobotRevoke = "robot.revoke"
)

// Actions lists every action an event may have: what an endpoint's
// ignore.actions may name.
func Actions() []string {
	return []string{ActionPush, ActionPull, ActionDelete, ActionMount, ActionGC, ActionDedup,
		ActionLogin, ActionLoginFailed, ActionLoginHeld, ActionRobotCreate, ActionRobotRevoke}
}

// Envelope is the body of a notification request.
type Envelope struct {
	Events []Event `json:"events"`
}

// Event is one registry event, in distribution's JSON form.
type Event struct {
	ID        string    `json:"id"`
	Timestamp time.Time `json:"timestamp"`
	Action    string    `json:"action"`
	Target    Target    `json:"target"`
	Request   Request   `json:"request"`
	Actor     Actor     `json:"actor"`
	Source    Source    `json:"source"`
	// Cairn details cairn's own actions and the logins; absent from
	// distribution's.
	Cairn *Details `json:"cairn,omitempty"`
}

// Target is what the event is about. Delete events carry only the
// repository and the digest (or the tag, for a tag delete), as in
// distribution.
type Target struct {
	MediaType string        `json:"mediaType,omitempty"`
	Digest    digest.Digest `json:"digest,omitempty"`
	Size      int64         `json:"size,omitempty"`
	// Length is Size under its older name; distribution sends both.
	Length         int64  `json:"length,omitempty"`
	Repository     string `json:"repository,omitempty"`
	FromRepository string `json:"fromRepository,omitempty"`
	URL            string `json:"url,omitempty"`
	Tag            string `json:"tag,omitempty"`
	// References are a manifest's descriptors, with
	// notifications.events.includereferences.
	References []ocispec.Descriptor `json:"references,omitempty"`
}

// Request describes the HTTP request behind an API event.
type Request struct {
	ID        string `json:"id,omitempty"`
	Addr      string `json:"addr,omitempty"`
	Host      string `json:"host,omitempty"`
	Method    string `json:"method,omitempty"`
	UserAgent string `json:"useragent,omitempty"`
}

// Actor is who caused the event: the authenticated user, if any.
type Actor struct {
	Name string `json:"name,omitempty"`
}

// Source is the registry process that generated the event.
type Source struct {
	Addr       string `json:"addr,omitempty"`
	InstanceID string `json:"instanceID,omitempty"`
}

// Details are the payloads of cairn's own actions.
type Details struct {
	GC    *GCRun      `json:"gc,omitempty"`
	Dedup *DedupLayer `json:"dedup,omitempty"`
	Login *Login      `json:"login,omitempty"`
}

// Login describes a login, failed login or held-back address (actions
// login, login.failed, login.held), as the audit log line has it.
type Login struct {
	// Source is the identity source that proved the user, or refused
	// it: "htpasswd", "robot", "ldap" or "oidc"; empty when none was
	// asked. Event.Source is something else: the registry process that
	// sent the event.
	Source string `json:"source,omitempty"`
	// Via is how the credentials came: "basic", "token", "refresh" or
	// "web".
	Via string `json:"via,omitempty"`
	// Robot: the user name is a robot key's (robot$name).
	Robot bool `json:"robot,omitempty"`
}

// GCRun summarises a finished garbage collection run.
type GCRun struct {
	RunID           string  `json:"runID,omitempty"`
	DryRun          bool    `json:"dryRun,omitempty"`
	Seconds         float64 `json:"durationSeconds"`
	Error           string  `json:"error,omitempty"`
	Manifests       int64   `json:"manifests"`
	TagIndexEntries int64   `json:"tagIndexEntries"`
	LayerLinks      int64   `json:"layerLinks"`
	Blobs           int64   `json:"blobs"`
	BytesFreed      int64   `json:"bytesFreed"`
	DedupFiles      int64   `json:"dedupFiles"`
	DeleteFailures  int64   `json:"deleteFailures"`
}

// DedupLayer describes a deduplicated layer.
type DedupLayer struct {
	// Outcome is what the dedup worker did ("deduplicated": the intact
	// copy was dropped, the layer is now served from its recipe).
	Outcome string `json:"outcome"`
}
