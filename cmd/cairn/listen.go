package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/metrics"
	"github.com/cairn-registry/cairn/internal/server"
)

// cairn serve's listeners: the main one (API, maybe the web page; TLS,
// HTTP/2, h2c), the operators' debug listener, and the drain at shutdown.

// Connection timeouts. Whole-request read and write timeouts would cut off
// multi-gigabyte layer transfers, so slow clients are bounded instead by
// the time to send headers (which also bounds the TLS handshake), by how
// long a request body may stall, and by how long an idle connection stays.
const (
	readHeaderTimeout = 30 * time.Second
	bodyIdleTimeout   = 2 * time.Minute
	idleTimeout       = 2 * time.Minute
	readyTimeout      = 5 * time.Second
)

// handler is the main listener's: the API, the web page unless it is on
// the debug listener, and a span per request when tracing is on.
func (s *serving) handler(opts server.Options) http.Handler {
	var handler http.Handler = server.New(s.reg, opts)
	if s.cfg.UI.Enabled {
		uiAuth := s.authz
		if s.cfg.UI.Listener == "debug" {
			uiAuth = nil // the operators' listener has no authentication
		} else if s.oidcWeb != nil {
			uiAuth = s.oidcWeb.Authorizer(uiAuth) // the web login's sessions (oidc.go)
		}
		robots := uiRobotKeys(s.cfg, s.log, auditEvents(s.cfg, s.notifier)) // robot keys from the page (ui.go)
		s.ui = newUI(s.reg, uiAuth, s.figures, s.m, s.oidcWeb != nil && s.cfg.UI.Listener != "debug", robots)
		if s.cfg.UI.Listener != "debug" {
			handler = withUI(handler, s.ui)
		}
	}
	// The web page's OIDC login at /auth/oidc/ (oidc.go).
	handler = withOIDCWeb(handler, s.oidcWeb)
	handler = withIdentity(handler, s.authz, s.log, auditEvents(s.cfg, s.notifier)) // /auth/token and the audit trail (auth.go)
	// Outermost but for tracing: every route sees the client's address.
	trusted, _ := s.cfg.HTTP.TrustedProxyPrefixes() // validated on load
	handler = server.ClientAddr(handler, trusted)
	if s.tr.Enabled {
		// A span per request, named by method and route; the propagated
		// context of a caller's trace is its parent.
		handler = otelhttp.NewHandler(handler, "cairn", otelhttp.WithTracerProvider(s.tr.Provider), otelhttp.WithPropagators(s.tr.Propagator),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + server.RouteName(r.URL.Path) }))
		s.log.Info("tracing on: spans exported over OTLP (OTEL_* environment)")
	}
	return handler
}

// httpServer is the main listener's server: timeouts, TLS, HTTP/2 and h2c
// as configured.
func (s *serving) httpServer(handler http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         s.tlsConfig,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if s.cfg.HTTP.HTTP2.Disabled {
		// A non-nil empty map keeps net/http from configuring HTTP/2.
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	if s.cfg.HTTP.H2C.Enabled {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		srv.Protocols.SetHTTP2(!s.cfg.HTTP.HTTP2.Disabled)
	}
	return srv
}

// startDebug starts the operators' listener (http.debug.addr): metrics,
// health, readiness, pprof, dedup statistics and maybe the web page; nil
// when none is configured. Its end is sent on serveErr.
func (s *serving) startDebug(serveErr chan<- error) (*http.Server, error) {
	dc := s.cfg.HTTP.Debug
	if dc.Addr == "" {
		return nil, nil
	}
	dln, err := net.Listen("tcp", dc.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen (http.debug.addr): %w", err)
	}
	opts := metrics.DebugOptions{
		MetricsPath:  dc.Prometheus.Path,
		ReadyTimeout: readyTimeout,
		Ready:        s.ready(),
		Handlers:     map[string]http.Handler{"/debug/health": s.checker.Handler()},
	}
	if dc.Prometheus.Enabled {
		opts.Metrics = s.m
	}
	if s.store != nil {
		opts.Handlers["/dedup/stats"] = statsHandler(s.engine)
	}
	if s.ui != nil && s.cfg.UI.Listener == "debug" {
		opts.Handlers[uiPrefix+"/"] = s.ui
	}
	debugSrv := &http.Server{
		Handler:           metrics.DebugHandler(opts),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.log.Info("debug listener: /metrics, /healthz, /readyz, /debug/health, /debug/pprof/", "addr", dln.Addr().String())
	go func() { serveErr <- fmt.Errorf("debug listener: %w", debugSrv.Serve(dln)) }()
	return debugSrv, nil
}

// ready is the debug listener's readiness. It reports unready from the
// moment shutdown starts, so that load balancers stop sending new requests
// while in-flight ones finish.
func (s *serving) ready() func(context.Context) error {
	storageReady := metrics.StorageReady(s.d)
	// A listing passes on a read-only or full store: readiness also
	// proves a write (rate-limited), unless writes are refused on
	// purpose (storage.maintenance.readonly).
	var storageWritable func(context.Context) error
	if !s.cfg.Storage.Maintenance.ReadOnly.Enabled {
		storageWritable = metrics.StorageWritable(s.d, 0)
	}
	return func(ctx context.Context) error {
		if s.stopping.Load() {
			return errors.New("shutting down")
		}
		if err := s.checker.Err(); err != nil {
			return fmt.Errorf("health: %w", err)
		}
		if s.store != nil {
			// Pulls of deduplicated layers and every GC need it.
			if _, err := s.store.StoreID(ctx); err != nil {
				return fmt.Errorf("dedup metadata store: %w", err)
			}
		}
		if err := storageReady(ctx); err != nil || storageWritable == nil {
			return err
		}
		return storageWritable(ctx)
	}
}

// logServing says what this process serves, and how blob GETs are answered.
func (s *serving) logServing(ln net.Listener) {
	cfg := s.cfg
	s.log.Info("cairn serving", "addr", ln.Addr().String(), "tls", s.tlsConfig != nil, "auth", authName(cfg.Auth),
		"driver", s.d.Name(), "root", rootOf(cfg),
		"delete", cfg.Storage.Delete.Enabled, "dedup", cfg.Storage.Dedup.Mode, "readonly", cfg.Storage.Maintenance.ReadOnly.Enabled, "version", versionString())
	if s.redirector == nil {
		s.log.Info("blob redirects off", "reason", s.redirectDesc)
		return
	}
	s.log.Info("blob GETs are redirected", "to", s.redirectDesc)
	if n, _ := config.ParseBytes(cfg.Storage.Dedup.Cache.Prefetch.Size); n > 0 {
		s.log.Warn("storage.dedup.cache.prefetch holds intact layers that redirected GETs never read; set storage.redirect.disable or a prefetch size of 0")
	}
}

// serve serves the main listener until ctx ends or a listener fails. On
// ctx's end it reports unready, stops the background work and drains the
// requests in flight (http.draintimeout).
func (s *serving) serve(ctx context.Context, ln net.Listener, httpSrv, debugSrv *http.Server, serveErr chan error, stopBG func()) error {
	go func() {
		if s.tlsConfig != nil {
			// Certificates come from TLSConfig; ServeTLS adds HTTP/2.
			serveErr <- httpSrv.ServeTLS(ln, "", "")
		} else {
			serveErr <- httpSrv.Serve(ln)
		}
	}()
	select {
	case err := <-serveErr:
		httpSrv.Close()
		if debugSrv != nil {
			debugSrv.Close()
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down: finishing in-flight requests", "timeout", s.cfg.HTTP.DrainTimeout)
	s.stopping.Store(true)
	stopBG()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.HTTP.DrainTimeout)
	defer cancel()
	err := httpSrv.Shutdown(sctx)
	if debugSrv != nil {
		debugSrv.Close()
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// newTLSConfig builds the listener's TLS configuration; nil without TLS.
// TLS 1.2 is the floor whatever the configuration says.
func newTLSConfig(c *config.TLS) (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if le := c.LetsEncrypt; le != nil {
		m := &autocert.Manager{
			Cache:  autocert.DirCache(le.CacheFile),
			Email:  le.Email,
			Prompt: autocert.AcceptTOS,
		}
		if len(le.Hosts) > 0 {
			m.HostPolicy = autocert.HostWhitelist(le.Hosts...)
		}
		if le.DirectoryURL != "" {
			m.Client = &acme.Client{DirectoryURL: le.DirectoryURL}
		}
		tc.GetCertificate = m.GetCertificate
		// TLS-ALPN-01: the ACME server proves the name on this listener.
		tc.NextProtos = []string{acme.ALPNProto}
	} else {
		cert, err := tls.LoadX509KeyPair(c.Certificate, c.Key)
		if err != nil {
			return nil, fmt.Errorf("config: http.tls: certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.MinimumTLS == "tls1.3" {
		tc.MinVersion = tls.VersionTLS13
	}
	if len(c.CipherSuites) > 0 {
		// tls.CipherSuites lists only the suites Go considers secure.
		ids := make(map[string]uint16)
		for _, cs := range tls.CipherSuites() {
			ids[cs.Name] = cs.ID
		}
		for _, name := range c.CipherSuites {
			id, ok := ids[name]
			if !ok {
				return nil, fmt.Errorf("config: http.tls.ciphersuites: %q is not a secure cipher suite", name)
			}
			tc.CipherSuites = append(tc.CipherSuites, id)
		}
	}
	if err := setClientAuth(tc, c); err != nil {
		return nil, err
	}
	return tc, nil
}

// setClientAuth sets how tc asks for client certificates
// (http.tls.clientcas, clientauth); none without client CAs.
func setClientAuth(tc *tls.Config, c *config.TLS) error {
	if len(c.ClientCAs) == 0 {
		return nil
	}
	pool := x509.NewCertPool()
	for _, p := range c.ClientCAs {
		pem, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("config: http.tls.clientcas: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("config: http.tls.clientcas: %s holds no PEM certificate", p)
		}
	}
	tc.ClientCAs = pool
	switch c.ClientAuth {
	case config.ClientAuthIfGiven:
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	case config.ClientAuthRequest:
		tc.ClientAuth = tls.RequestClientCert
	case config.ClientAuthAny:
		tc.ClientAuth = tls.RequireAnyClientCert
	default:
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return nil
}
