package auth

import "net/http"

// Endpoint is the kind of API endpoint a request addresses, as far as
// access control cares.
type Endpoint int

const (
	// EndpointOther is GET /v2/ and any path that names no endpoint: the
	// caller must be authenticated, nothing more.
	EndpointOther Endpoint = iota
	// EndpointCatalog is /v2/_catalog.
	EndpointCatalog
	// EndpointTags is /v2/<name>/tags/list.
	EndpointTags
	// EndpointManifest is /v2/<name>/manifests/<reference>.
	EndpointManifest
	// EndpointReferrers is /v2/<name>/referrers/<digest>.
	EndpointReferrers
	// EndpointBlob is /v2/<name>/blobs/<digest>.
	EndpointBlob
	// EndpointUpload is /v2/<name>/blobs/uploads/ and an upload session.
	EndpointUpload
)

// Needed returns the accesses a request to ep on repository name with
// method requires, as distribution computes them:
//   - the catalog needs registry:catalog:*;
//   - reads (GET, HEAD) of tags, manifests, blobs and referrers need pull;
//   - DELETE of a manifest or blob needs delete;
//   - any other method on a manifest or blob (PUT, POST, PATCH) needs
//     pull and push;
//   - every method on an upload needs pull and push: an upload session,
//     even its status or its cancellation, belongs to a push.
//
// A cross-repository mount also needs pull on the source repository; the
// server checks that separately and falls back to a plain upload without
// it. EndpointOther needs nothing beyond authentication (nil).
func Needed(ep Endpoint, name, method string) []Access {
	repo := func(actions ...string) []Access {
		out := make([]Access, len(actions))
		for i, a := range actions {
			out[i] = Access{Type: TypeRepository, Name: name, Action: a}
		}
		return out
	}
	read := method == http.MethodGet || method == http.MethodHead
	switch ep {
	case EndpointCatalog:
		return []Access{{Type: TypeRegistry, Name: "catalog", Action: ActionAll}}
	case EndpointTags, EndpointReferrers:
		return repo(ActionPull)
	case EndpointManifest, EndpointBlob:
		switch {
		case read:
			return repo(ActionPull)
		case method == http.MethodDelete:
			return repo(ActionDelete)
		}
		return repo(ActionPull, ActionPush)
	case EndpointUpload:
		return repo(ActionPull, ActionPush)
	}
	return nil
}
