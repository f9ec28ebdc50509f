package server

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no header", "10.1.1.1:4000", nil, "10.1.1.1:4000"},
		{"one hop", "10.1.1.1:4000", []string{"198.51.100.7"}, "198.51.100.7:0"},
		{"spoofed left part ignored", "10.1.1.1:4000", []string{"1.2.3.4, 198.51.100.7"}, "198.51.100.7:0"},
		{"two trusted hops", "10.1.1.1:4000", []string{"198.51.100.7, 10.2.2.2"}, "198.51.100.7:0"},
		{"headers joined in order", "127.0.0.1:4000", []string{"1.2.3.4", "198.51.100.7, 10.2.2.2"}, "198.51.100.7:0"},
		{"untrusted peer keeps its own", "203.0.113.9:4000", []string{"198.51.100.7"}, "203.0.113.9:4000"},
		{"garbage where a proxy writes", "10.1.1.1:4000", []string{"198.51.100.7, bogus"}, "10.1.1.1:4000"},
		{"only proxies", "10.1.1.1:4000", []string{"10.3.3.3"}, "10.1.1.1:4000"},
		{"ipv6 client", "10.1.1.1:4000", []string{"2001:db8::1"}, "[2001:db8::1]:0"},
		{"mapped ipv4 peer", "[::ffff:10.1.1.1]:4000", []string{"198.51.100.7"}, "198.51.100.7:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			h := ClientAddr(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.RemoteAddr }), trusted)
			r := httptest.NewRequest(http.MethodGet, "/v2/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tc.want {
				t.Errorf("RemoteAddr %q, want %q", got, tc.want)
			}
		})
	}
}
