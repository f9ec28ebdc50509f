package server

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientAddr makes r.RemoteAddr the client's address when the request came
// through trusted proxies (http.trustedproxies): behind a load balancer
// every request comes from its address, so the failed-login limit would
// hold back every client at once for one guesser, and the logs, the audit
// trail and the events would name the balancer. X-Forwarded-For is read
// from the right: each trusted proxy appended the address it saw, and the
// first address that is not a trusted proxy's is the client; what lies to
// its left the client wrote itself and is ignored. A request from an
// address that is not trusted keeps its own, whatever its headers say.
// The port of a forwarded client is 0: the proxy's says nothing of it.
func ClientAddr(next http.Handler, trusted []netip.Prefix) http.Handler {
	if len(trusted) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if addr, ok := forwardedClient(r, trusted); ok {
			r2 := *r
			r2.RemoteAddr = net.JoinHostPort(addr.String(), "0")
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedClient returns the client's address per X-Forwarded-For when
// r's peer is a trusted proxy.
func forwardedClient(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !isTrusted(peer.Addr(), trusted) {
		return netip.Addr{}, false
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// Not an address a trusted proxy wrote: nothing to its left
			// can be believed, and the nearest proxy is what is known.
			return netip.Addr{}, false
		}
		a = a.Unmap()
		if !isTrusted(a, trusted) {
			return a, true
		}
	}
	return netip.Addr{}, false // only proxies: the nearest is the client
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
