// Package s3proxy is a reverse proxy for an S3-compatible server (MinIO in
// the tests) that adds a fixed delay to every request and counts requests
// by S3 operation, so a benchmark can say what a registry costs on a real
// object store: how many requests of each price class, and how long they
// take at a realistic first-byte latency.
//
// Requests are classified from the method, the query and a few headers,
// for path-style addressing (/bucket/key), which the tests use.
package s3proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Op is an S3 operation as the proxy classifies it.
type Op int

// Operations, in the order reports list them.
const (
	Get               Op = iota // GetObject, whole object
	GetRange                    // GetObject with a Range header
	Head                        // HeadObject (or HeadBucket)
	Put                         // PutObject
	Copy                        // CopyObject (PUT with x-amz-copy-source)
	List                        // ListObjects(V2) on the bucket
	Delete                      // DeleteObject
	DeleteBulk                  // DeleteObjects (POST ?delete)
	MultipartCreate             // CreateMultipartUpload (POST ?uploads)
	MultipartPart               // UploadPart (PUT ?partNumber&uploadId)
	MultipartCopy               // UploadPartCopy (the same with x-amz-copy-source)
	MultipartComplete           // CompleteMultipartUpload (POST ?uploadId)
	MultipartAbort              // AbortMultipartUpload (DELETE ?uploadId)
	MultipartList               // ListParts or ListMultipartUploads
	BucketOp                    // CreateBucket, GetBucketLocation and other bucket calls
	Other                       // anything else
	numOps
)

// Ops lists every operation in report order.
func Ops() []Op {
	ops := make([]Op, numOps)
	for i := range ops {
		ops[i] = Op(i)
	}
	return ops
}

var opNames = [numOps]string{
	Get: "GET", GetRange: "GET-range", Head: "HEAD", Put: "PUT", Copy: "COPY",
	List: "LIST", Delete: "DELETE", DeleteBulk: "DELETE-bulk",
	MultipartCreate: "MPU-create", MultipartPart: "MPU-part", MultipartCopy: "MPU-copy",
	MultipartComplete: "MPU-complete", MultipartAbort: "MPU-abort", MultipartList: "MPU-list",
	BucketOp: "bucket", Other: "other",
}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// Class is how S3 prices a request.
type Class int

// Price classes of S3 Standard.
const (
	// ClassTier1 is PUT, COPY, POST and LIST requests.
	ClassTier1 Class = iota
	// ClassTier2 is GET, HEAD and every other request not listed.
	ClassTier2
	// ClassFree is DELETE and CANCEL (abort) requests. DeleteObjects is a
	// POST on the wire but billed as deletes.
	ClassFree
)

// Class returns the price class of o.
func (o Op) Class() Class {
	switch o {
	case Put, Copy, List, MultipartCreate, MultipartPart, MultipartCopy, MultipartComplete, MultipartList, BucketOp:
		return ClassTier1
	case Delete, DeleteBulk, MultipartAbort:
		return ClassFree
	}
	return ClassTier2
}

// Classify names the S3 operation of r (path-style addressing).
func Classify(r *http.Request) Op {
	q := r.URL.Query()
	has := func(k string) bool { _, ok := q[k]; return ok }
	// "/bucket" or "/bucket/": no key, a call on the bucket itself.
	bucketOnly := !strings.Contains(strings.Trim(r.URL.Path, "/"), "/")
	copySource := r.Header.Get("X-Amz-Copy-Source") != ""
	switch r.Method {
	case http.MethodGet:
		switch {
		case has("uploadId") || has("uploads"):
			return MultipartList
		case bucketOnly && (has("list-type") || len(q) == 0 || has("prefix") || has("delimiter") || has("marker")):
			return List
		case bucketOnly:
			return BucketOp
		case r.Header.Get("Range") != "":
			return GetRange
		}
		return Get
	case http.MethodHead:
		return Head
	case http.MethodPut:
		switch {
		case has("partNumber") && has("uploadId") && copySource:
			return MultipartCopy
		case has("partNumber") && has("uploadId"):
			return MultipartPart
		case bucketOnly:
			return BucketOp
		case copySource:
			return Copy
		}
		return Put
	case http.MethodPost:
		switch {
		case has("delete"):
			return DeleteBulk
		case has("uploads"):
			return MultipartCreate
		case has("uploadId"):
			return MultipartComplete
		}
	case http.MethodDelete:
		switch {
		case has("uploadId"):
			return MultipartAbort
		case bucketOnly:
			return BucketOp
		}
		return Delete
	}
	return Other
}

// Counts are the requests the proxy forwarded, by operation, and the body
// bytes each way.
type Counts struct {
	Requests [numOps]int64
	// Failed counts responses with a status of 400 or more (a HEAD of a
	// missing key is one: it is billed all the same).
	Failed int64
	// Up is request body bytes sent to the server; Down is response body
	// bytes returned to the client.
	Up, Down int64
}

// Of returns the number of requests of o.
func (c Counts) Of(o Op) int64 { return c.Requests[o] }

// Total is the number of requests of every operation.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c.Requests {
		n += v
	}
	return n
}

// InClass is the number of requests priced as class k.
func (c Counts) InClass(k Class) int64 {
	var n int64
	for o, v := range c.Requests {
		if Op(o).Class() == k {
			n += v
		}
	}
	return n
}

// Sub returns c minus prev: what happened between two snapshots.
func (c Counts) Sub(prev Counts) Counts {
	for i := range c.Requests {
		c.Requests[i] -= prev.Requests[i]
	}
	c.Failed -= prev.Failed
	c.Up -= prev.Up
	c.Down -= prev.Down
	return c
}

// Add returns c plus o.
func (c Counts) Add(o Counts) Counts {
	for i := range c.Requests {
		c.Requests[i] += o.Requests[i]
	}
	c.Failed += o.Failed
	c.Up += o.Up
	c.Down += o.Down
	return c
}

// String lists the non-zero operations: "GET 3, HEAD 2 (5 requests)".
func (c Counts) String() string {
	var parts []string
	for _, o := range Ops() {
		if n := c.Requests[o]; n != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	if len(parts) == 0 {
		return "no requests"
	}
	return fmt.Sprintf("%s (%d requests)", strings.Join(parts, ", "), c.Total())
}

// Proxy is a running proxy on a loopback port.
type Proxy struct {
	// URL is the proxy's endpoint, to use as the S3 region endpoint.
	URL string
	// Delay is added before each request is forwarded.
	Delay time.Duration

	requests [numOps]atomic.Int64
	failed   atomic.Int64
	up, down atomic.Int64
	srv      *http.Server
}

// Start runs a proxy to target (an S3 endpoint such as
// http://127.0.0.1:9000) that waits delay before forwarding each request.
func Start(target string, delay time.Duration) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("s3proxy: bad target %q", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3proxy: %w", err)
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), Delay: delay}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// SigV4 signs the Host header: forward the one the client signed.
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     time.Minute,
			// Bodies pass through as they are: no transparent gzip.
			DisableCompression: true,
		},
		// Stream bodies as they come rather than in the proxy's buffer:
		// a restore's first byte is part of what is measured.
		FlushInterval: -1,
		// A client that stops reading (a restore cancelled, a reader closed
		// early) is ordinary here: answer 502 without the default log line.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(rp, w, r) }),
		ReadHeaderTimeout: time.Minute,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *Proxy) serve(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
	p.requests[Classify(r)].Add(1)
	if p.Delay > 0 {
		t := time.NewTimer(p.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if r.Body != nil {
		r.Body = &countingBody{ReadCloser: r.Body, n: &p.up}
	}
	cw := &countingWriter{ResponseWriter: w, n: &p.down}
	rp.ServeHTTP(cw, r)
	if cw.status >= 400 {
		p.failed.Add(1)
	}
}

// Snapshot returns the counts so far.
func (p *Proxy) Snapshot() Counts {
	var c Counts
	for i := range c.Requests {
		c.Requests[i] = p.requests[i].Load()
	}
	c.Failed, c.Up, c.Down = p.failed.Load(), p.up.Load(), p.down.Load()
	return c
}

// Reset sets every count to zero.
func (p *Proxy) Reset() {
	for i := range p.requests {
		p.requests[i].Store(0)
	}
	p.failed.Store(0)
	p.up.Store(0)
	p.down.Store(0)
}

// Close stops the proxy; requests in flight are cut off.
func (p *Proxy) Close() error { return p.srv.Close() }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	b.n.Add(int64(n))
	return n, err
}

// countingWriter records the status and counts the body bytes written.
// Unwrap lets ReverseProxy's ResponseController reach Flush.
type countingWriter struct {
	http.ResponseWriter
	n      *atomic.Int64
	status int
}

func (w *countingWriter) WriteHeader(code int) {
	// 1xx responses (100 Continue) are forwarded too; the final one counts.
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
