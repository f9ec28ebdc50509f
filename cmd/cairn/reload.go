package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
)

// Reloading (SIGHUP, or a change of the configuration file, the htpasswd
// file or the TLS certificate files, checked every reloadPoll): the
// configuration is read again and what can change while serving is
// swapped in at once: authentication (htpasswd users, access control,
// anonymous pulls, token keys) and the TLS certificate. A configuration
// that does not load, or whose new parts cannot be built, is refused with
// one log line and the running one stays. Turning authentication on or off
// and any other change need a restart, which the log says.

// reloadPoll is how often the watched files are checked for changes.
const reloadPoll = 2 * time.Second

// reloader holds what a reload replaces.
type reloader struct {
	log    *slog.Logger
	load   func() (*config.Config, error)
	cfg    *config.Config // the running configuration
	authz  *auth.Swappable
	cert   *atomic.Pointer[tls.Certificate]
	stamps map[string]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// watchedFiles are the files whose change triggers a reload.
func watchedFiles(path string, c *config.Config) []string {
	files := []string{}
	if path != "" {
		files = append(files, path)
	}
	if h := c.Auth.Htpasswd; h != nil {
		files = append(files, h.Path)
	}
	if t := c.HTTP.TLS; t != nil && t.LetsEncrypt == nil {
		files = append(files, t.Certificate, t.Key)
	}
	return files
}

func stamp(files []string) map[string]fileStamp {
	out := make(map[string]fileStamp, len(files))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			out[f] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return out
}

// run reloads on SIGHUP and when a watched file changes, until ctx ends.
// Its own loop, not a task: a reload must not wait behind a GC or dedup
// queue, and a SIGHUP is a signal to wait on, not a period.
func (r *reloader) run(ctx context.Context, path string) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	r.stamps = stamp(watchedFiles(path, r.cfg))
	t := time.NewTicker(reloadPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("SIGHUP")
		case <-t.C:
			now := stamp(watchedFiles(path, r.cfg))
			if !reflect.DeepEqual(now, r.stamps) {
				r.stamps = now
				r.reload("a watched file changed")
			}
		}
	}
}

// reload reads the configuration again and swaps in what may change.
func (r *reloader) reload(why string) {
	next, err := r.load()
	if err == nil {
		err = r.apply(next)
	}
	if err != nil {
		r.log.Error("config reload refused; serving with the running configuration", "trigger", why, "err", err)
		return
	}
	if rest := restartOnly(r.cfg, next); len(rest) > 0 {
		r.log.Warn("config reload: these sections changed and need a restart", "trigger", why, "sections", rest)
	}
	r.cfg = next
	r.log.Info("config reloaded", "trigger", why, "auth", authName(next.Auth))
}

// apply builds the new authorizer and certificate, then swaps both.
func (r *reloader) apply(next *config.Config) error {
	if next.Auth.Enabled() != r.cfg.Auth.Enabled() {
		return errors.New("auth: turning authentication on or off needs a restart")
	}
	var authz auth.Authorizer
	if r.authz != nil {
		a, err := newAuthorizer(next.Auth)
		if err != nil {
			return err
		}
		authz = a
	}
	var cert *tls.Certificate
	if r.cert != nil {
		t := next.HTTP.TLS
		if t == nil || t.LetsEncrypt != nil {
			return errors.New("http.tls: changing how TLS is served needs a restart")
		}
		c, err := tls.LoadX509KeyPair(t.Certificate, t.Key)
		if err != nil {
			return fmt.Errorf("config: http.tls: certificate and key: %w", err)
		}
		cert = &c
	}
	if authz != nil {
		r.authz.Swap(authz)
	}
	if cert != nil {
		r.cert.Store(cert)
	}
	return nil
}

// restartOnly names the top-level sections besides auth and the TLS files
// that differ between old and next.
func restartOnly(old, next *config.Config) []string {
	a, b := *old, *next
	a.Auth, b.Auth = config.Auth{}, config.Auth{}
	if a.HTTP.TLS != nil && b.HTTP.TLS != nil {
		ta, tb := *a.HTTP.TLS, *b.HTTP.TLS
		ta.Certificate, ta.Key, tb.Certificate, tb.Key = "", "", "", ""
		a.HTTP.TLS, b.HTTP.TLS = &ta, &tb
	}
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if f.IsExported() && !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			out = append(out, name)
		}
	}
	return out
}
