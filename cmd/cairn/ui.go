package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/metrics"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/webui"
)

// uiPrefix is where the web page lives on its listener.
const uiPrefix = "/ui"

// newUI builds the web page's handler; its storage figures are figures'
// (measured in the background on dedup's and GC's changes), its cache
// ratios the metrics'.
// With oidcLogin, visitors without credentials are sent to the OIDC login;
// with robots, admins manage robot keys there.
func newUI(reg *registry.Registry, authz auth.Authorizer, figures *webui.Figures, m *metrics.Metrics, oidcLogin bool, robots *webui.RobotKeys) http.Handler {
	caches := func() []webui.CacheRatio {
		families, err := m.Gatherer().Gather()
		if err != nil {
			return nil
		}
		by := map[string]*webui.CacheRatio{}
		var order []string
		for _, f := range families {
			if f.GetName() != "cairn_cache_requests_total" {
				continue
			}
			for _, s := range f.GetMetric() {
				var cache, result string
				for _, l := range s.GetLabel() {
					switch l.GetName() {
					case "cache":
						cache = l.GetValue()
					case "result":
						result = l.GetValue()
					}
				}
				c := by[cache]
				if c == nil {
					c = &webui.CacheRatio{Cache: cache}
					by[cache] = c
					order = append(order, cache)
				}
				v := s.GetCounter().GetValue()
				c.Lookups += v
				if strings.HasPrefix(result, "hit") {
					c.Hits += v
				}
			}
		}
		out := make([]webui.CacheRatio, 0, len(order))
		for _, k := range order {
			out = append(out, *by[k])
		}
		return out
	}
	opts := webui.Options{Registry: reg, Auth: authz, Storage: figures.Current, Caches: caches, History: figures.History(), Prefix: uiPrefix, Robots: robots}
	if oidcLogin {
		opts.Login, opts.Logout = auth.LoginURL, auth.OIDCPath+"/logout"
	}
	return webui.Handler(opts)
}

// uiRobotKeys is where the page manages robot keys: the file cairn serve
// checks keys against, audit lines to log and, with auth.audit.events,
// events to events, as `cairn robot` writes and sends them. Nil (the page
// says robot keys are off) without accounts, and on the operators'
// listener, which has no authentication to tell an admin by.
func uiRobotKeys(cfg *config.Config, log *slog.Logger, events interface{ Notify(notify.Event) }) *webui.RobotKeys {
	if cfg.UI.Listener == "debug" || !cfg.Auth.Accounts() || cfg.Auth.Robots.Path == "" {
		return nil
	}
	return &webui.RobotKeys{Path: cfg.Auth.Robots.Path, Log: log, Events: events}
}

// uiMeasure measures the page's storage figures: dedup's statistics (one
// read of every recipe) when dedup keeps a metadata store here.
func uiMeasure(engine *dedup.Engine, hasStore bool) func(context.Context) (webui.Storage, error) {
	return func(ctx context.Context) (webui.Storage, error) {
		if !hasStore {
			return webui.Storage{}, nil
		}
		st, err := engine.Stats(ctx)
		if err != nil {
			return webui.Storage{}, err
		}
		return webui.Storage{Dedup: true, Logical: st.LogicalBytes, Stored: st.StoredBytes.Total}, nil
	}
}

// layerEventsTee tells every one of its receivers (nil ones skipped) of
// a deduplicated layer.
type layerEventsTee []dedup.LayerEvents

func (t layerEventsTee) LayerDeduplicated(layer digest.Digest) {
	for _, e := range t {
		if e != nil {
			e.LayerDeduplicated(layer)
		}
	}
}

// withUI serves the page under uiPrefix beside next.
func withUI(next, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == uiPrefix || strings.HasPrefix(r.URL.Path, uiPrefix+"/") {
			ui.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
