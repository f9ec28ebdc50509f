// Package gcs is the Google Cloud Storage driver: cairn's storage contract on
// one bucket, through cloud.google.com/go/storage. A path maps to the object
// key rootdirectory + path (like distribution's gcs driver, so a bucket it
// wrote is served as is); directories are implied by key prefixes.
//
// Objects are immutable, so appending (chunked uploads) composes the earlier
// object with a part uploaded by the appending writer; see writer.go.
package gcs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const (
	driverName = "gcs"

	// minChunkSize is GCS's resumable upload granularity; chunk sizes are
	// multiples of it.
	minChunkSize                = 256 << 10
	defaultChunkSize            = 16 << 20
	defaultMaxDeleteConcurrency = 256
	// listPageSize is the most keys one objects.list page returns.
	listPageSize = 1000
	// maxComponents is how many components a GCS composite object may have.
	maxComponents = 1024
	contentType   = "application/octet-stream"
)

// Parameters configures the driver; the yaml keys are distribution's.
type Parameters struct {
	Bucket string `yaml:"bucket"`
	// Keyfile is a service account JSON key file. With neither Keyfile nor
	// Credentials, Application Default Credentials are used.
	Keyfile string `yaml:"keyfile"`
	// Credentials is a service account key given inline.
	Credentials Credentials `yaml:"credentials"`
	// RootDirectory prefixes every key ("" serves the whole bucket).
	RootDirectory string `yaml:"rootdirectory"`
	// ChunkSize is the upload chunk size of writers, a multiple of 256 KiB
	// (default 16 MiB). Each open writer buffers one chunk.
	ChunkSize int `yaml:"chunksize"`
	// Endpoint overrides the service URL (e.g. http://127.0.0.1:4443 for
	// fake-gcs-server). Without credentials it is used unauthenticated.
	Endpoint string `yaml:"endpoint"`
	// MaxDeleteConcurrency bounds the delete requests in flight (default 256).
	MaxDeleteConcurrency int `yaml:"maxdeleteconcurrency"`
}

// Credentials is a service account key as JSON. In YAML it is either a
// mapping of the key's fields (distribution's form) or a JSON string.
type Credentials []byte

// UnmarshalYAML accepts both forms. It uses the decoder-agnostic signature so
// this package needs no YAML library.
func (c *Credentials) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err == nil {
		*c = Credentials(s)
		return nil
	}
	var m map[string]any
	if err := unmarshal(&m); err != nil {
		return fmt.Errorf("gcs credentials: want a mapping or a JSON string: %w", err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("gcs credentials: %w", err)
	}
	*c = b
	return nil
}

// Driver is a driver.Driver on one GCS bucket.
type Driver struct {
	client *storage.Client
	bucket *storage.BucketHandle
	// prefix is rootdirectory with a trailing "/", or "".
	prefix    string
	chunkSize int
	// deleteSlots bounds the delete requests in flight across all calls.
	deleteSlots chan struct{}
	// signer holds the key that signs redirect URLs; nil when there is none.
	signer *storage.SignedURLOptions
	// Tests shrink these to reach page and component limits cheaply.
	pageSize      int
	maxComponents int64
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.FileStater = (*Driver)(nil)
)

// New connects to the bucket named by p. It sends no request: a missing
// bucket or bad credentials show up on first use.
func New(ctx context.Context, p Parameters) (*Driver, error) {
	return newDriver(ctx, p)
}

// newDriver is New with extra client options, for tests (e.g. a counting
// HTTP client).
func newDriver(ctx context.Context, p Parameters, extra ...option.ClientOption) (*Driver, error) {
	if p.Bucket == "" {
		return nil, errors.New("gcs: bucket is required")
	}
	if p.ChunkSize == 0 {
		p.ChunkSize = defaultChunkSize
	}
	if p.ChunkSize < minChunkSize || p.ChunkSize%minChunkSize != 0 {
		return nil, fmt.Errorf("gcs: chunksize %d is not a positive multiple of %d", p.ChunkSize, minChunkSize)
	}
	if p.MaxDeleteConcurrency == 0 {
		p.MaxDeleteConcurrency = defaultMaxDeleteConcurrency
	}
	if p.MaxDeleteConcurrency < 0 {
		return nil, fmt.Errorf("gcs: maxdeleteconcurrency %d is negative", p.MaxDeleteConcurrency)
	}
	if p.Keyfile != "" && len(p.Credentials) > 0 {
		return nil, errors.New("gcs: keyfile and credentials are exclusive")
	}

	opts := []option.ClientOption{storage.WithDisabledClientMetrics()}
	creds := []byte(p.Credentials)
	if p.Keyfile != "" {
		b, err := os.ReadFile(p.Keyfile)
		if err != nil {
			return nil, fmt.Errorf("gcs: keyfile: %w", err)
		}
		creds = b
	}
	var signer *storage.SignedURLOptions
	if len(creds) > 0 {
		var err error
		if signer, err = urlSigner(creds, p.Endpoint); err != nil {
			return nil, err
		}
	}
	switch {
	case p.Keyfile != "":
		opts = append(opts, option.WithAuthCredentialsFile(option.ServiceAccount, p.Keyfile))
	case len(p.Credentials) > 0:
		opts = append(opts, option.WithAuthCredentialsJSON(option.ServiceAccount, p.Credentials))
	case p.Endpoint != "":
		opts = append(opts, option.WithoutAuthentication())
	}
	if p.Endpoint != "" {
		// Explicit options rather than STORAGE_EMULATOR_HOST: the process
		// environment is not the driver's to set.
		opts = append(opts, option.WithEndpoint(strings.TrimRight(p.Endpoint, "/")+"/storage/v1/"))
	}
	client, err := storage.NewClient(ctx, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("gcs: %w", err)
	}
	// Every call the driver makes is safe to repeat: uploads resend the same
	// bytes, composes and copies name pinned sources, and a repeated delete's
	// 404 counts as success.
	client.SetRetry(storage.WithPolicy(storage.RetryAlways))

	prefix := strings.Trim(p.RootDirectory, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Driver{
		client:        client,
		bucket:        client.Bucket(p.Bucket),
		signer:        signer,
		prefix:        prefix,
		chunkSize:     p.ChunkSize,
		deleteSlots:   make(chan struct{}, p.MaxDeleteConcurrency),
		pageSize:      listPageSize,
		maxComponents: maxComponents,
	}, nil
}

// Close releases the client's connections.
func (d *Driver) Close() error { return d.client.Close() }

// Name implements driver.Driver.
func (d *Driver) Name() string { return driverName }

// fileKey returns the object key of a file path; "/" is never a file.
func (d *Driver) fileKey(p string) (string, error) {
	if p == "/" || !driver.ValidPath(p) {
		return "", driver.InvalidPathError{Path: p, Driver: driverName}
	}
	return d.prefix + p[1:], nil
}

// dirPrefix returns the key prefix of everything below directory p.
func (d *Driver) dirPrefix(p string) (string, error) {
	if !driver.ValidPath(p) {
		return "", driver.InvalidPathError{Path: p, Driver: driverName}
	}
	if p == "/" {
		return d.prefix, nil
	}
	return d.prefix + p[1:] + "/", nil
}

// fail maps a client error on path to the driver's errors.
func fail(op, path string, err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) {
		return driver.PathNotFoundError{Path: path, Driver: driverName}
	}
	err = fmt.Errorf("gcs: %s %s: %w", op, path, err)
	if ge := (*googleapi.Error)(nil); errors.As(err, &ge) && ge.Code == http.StatusForbidden {
		// The credentials lack the permission, or a retention policy holds the object.
		return driver.Refused(driver.ErrPermission, err)
	}
	return err
}

// GetContent implements driver.Driver.
func (d *Driver) GetContent(ctx context.Context, path string) ([]byte, error) {
	key, err := d.fileKey(path)
	if err != nil {
		return nil, err
	}
	r, err := d.bucket.Object(key).NewReader(ctx)
	if err != nil {
		return nil, fail("get", path, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	buf.Grow(int(max(r.Attrs.Size, 0)) + bytes.MinRead)
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fail("get", path, err)
	}
	return buf.Bytes(), nil
}

// PutContent implements driver.Driver. An object upload replaces the key
// atomically.
func (d *Driver) PutContent(ctx context.Context, path string, content []byte) error {
	key, err := d.fileKey(path)
	if err != nil {
		return err
	}
	w := d.bucket.Object(key).NewWriter(ctx)
	w.ContentType = contentType
	// The writer buffers a whole chunk: size it to the content, not to the
	// 16 MiB default, so small puts stay small.
	w.ChunkSize = min(d.chunkSize, (len(content)/minChunkSize+1)*minChunkSize)
	if _, err := w.Write(content); err != nil {
		_ = w.Close() // the Write error is the one to report
		return fail("put", path, err)
	}
	if err := w.Close(); err != nil {
		return fail("put", path, err)
	}
	return nil
}

// Reader implements driver.Driver.
func (d *Driver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	key, err := d.fileKey(path)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, driver.InvalidOffsetError{Path: path, Offset: offset, Driver: driverName}
	}
	obj := d.bucket.Object(key)
	r, err := obj.NewRangeReader(ctx, offset, -1)
	if err == nil {
		return r, nil
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusRequestedRangeNotSatisfiable {
		return nil, fail("read", path, err)
	}
	// 416: the offset is at or past the end. At the end is an empty read.
	attrs, err := obj.Attrs(ctx)
	if err != nil {
		return nil, fail("read", path, err)
	}
	if offset == attrs.Size {
		return io.NopCloser(strings.NewReader("")), nil
	}
	return nil, driver.InvalidOffsetError{Path: path, Offset: offset, Driver: driverName}
}

// ReadRange implements driver.Driver with one ranged read. GCS answers a
// range starting at or past the end with 416, the contract's
// InvalidOffsetError.
func (d *Driver) ReadRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	key, err := d.fileKey(path)
	if err != nil {
		return nil, err
	}
	end, err := driver.RangeEnd(driverName, path, offset, length)
	if err != nil {
		return nil, err
	}
	r, err := d.bucket.Object(key).NewRangeReader(ctx, offset, end-offset)
	if err != nil {
		var ge *googleapi.Error
		if errors.As(err, &ge) && ge.Code == http.StatusRequestedRangeNotSatisfiable {
			return nil, driver.InvalidOffsetError{Path: path, Offset: offset, Driver: driverName}
		}
		return nil, fail("read", path, err)
	}
	// Should a server answer such a range with an empty 200 or 206 instead
	// (Azurite does so for Azure), the object's size, which every answer
	// carries, still refuses it.
	if offset >= r.Attrs.Size {
		r.Close()
		return nil, driver.InvalidOffsetError{Path: path, Offset: offset, Driver: driverName}
	}
	return r, nil
}

// Writer implements driver.Driver.
func (d *Driver) Writer(ctx context.Context, path string, append bool) (driver.FileWriter, error) {
	key, err := d.fileKey(path)
	if err != nil {
		return nil, err
	}
	return d.newWriter(ctx, path, key, append)
}

// Stat implements driver.Driver. A path with no object is a directory when
// some key starts with path + "/".
func (d *Driver) Stat(ctx context.Context, path string) (driver.FileInfo, error) {
	if path == "/" {
		return driver.FileInfo{Path: path, IsDir: true}, nil
	}
	if fi, err := d.StatFile(ctx, path); !errors.Is(err, driver.ErrNotFound) {
		return fi, err
	}
	q := &storage.Query{Prefix: d.prefix + path[1:] + "/"}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return driver.FileInfo{}, fmt.Errorf("gcs: stat %s: %w", path, err)
	}
	it := d.bucket.Objects(ctx, q)
	it.PageInfo().MaxSize = 1
	switch _, err := it.Next(); {
	case err == nil:
		return driver.FileInfo{Path: path, IsDir: true}, nil
	case errors.Is(err, iterator.Done):
		return driver.FileInfo{}, driver.PathNotFoundError{Path: path, Driver: driverName}
	default:
		return driver.FileInfo{}, fail("stat", path, err)
	}
}

// StatFile implements driver.FileStater with the object's attributes alone:
// unlike Stat, a missing object is not followed by a listing to see whether
// path is a directory.
func (d *Driver) StatFile(ctx context.Context, path string) (driver.FileInfo, error) {
	if path == "/" {
		return driver.FileInfo{}, driver.PathNotFoundError{Path: path, Driver: driverName}
	}
	key, err := d.fileKey(path)
	if err != nil {
		return driver.FileInfo{}, err
	}
	attrs, err := d.bucket.Object(key).Attrs(ctx)
	if err != nil {
		return driver.FileInfo{}, fail("stat", path, err)
	}
	return fileInfo(path, attrs), nil
}

func fileInfo(path string, attrs *storage.ObjectAttrs) driver.FileInfo {
	mod := attrs.Updated
	if mod.IsZero() {
		mod = attrs.Created
	}
	return driver.FileInfo{Path: path, Size: attrs.Size, ModTime: mod}
}

// List implements driver.Driver with one delimited listing.
func (d *Driver) List(ctx context.Context, path string) ([]string, error) {
	prefix, err := d.dirPrefix(path)
	if err != nil {
		return nil, err
	}
	q := &storage.Query{Prefix: prefix, Delimiter: "/"}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return nil, fmt.Errorf("gcs: list %s: %w", path, err)
	}
	it := d.bucket.Objects(ctx, q)
	it.PageInfo().MaxSize = d.pageSize
	var out []string
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fail("list", path, err)
		}
		name := strings.TrimSuffix(attrs.Prefix, "/")
		if attrs.Prefix == "" {
			name = attrs.Name
		}
		// Keys that are no valid path (directory markers "dir/", an
		// appending writer's parts "x~part~...") are not entries.
		if p := d.keyPath(name); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 && path != "/" {
		return nil, driver.PathNotFoundError{Path: path, Driver: driverName}
	}
	slices.Sort(out)
	return out, nil
}

// keyPath returns the driver path of key, or "" when key is outside the root
// or no valid path.
func (d *Driver) keyPath(key string) string {
	rest, ok := strings.CutPrefix(key, d.prefix)
	if !ok || rest == "" {
		return ""
	}
	p := "/" + rest
	if !driver.ValidPath(p) {
		return ""
	}
	return p
}

// Move implements driver.Driver: a server-side copy, then a delete of src.
func (d *Driver) Move(ctx context.Context, src, dst string) error {
	srcKey, err := d.fileKey(src)
	if err != nil {
		return err
	}
	dstKey, err := d.fileKey(dst)
	if err != nil {
		return err
	}
	srcObj := d.bucket.Object(srcKey)
	if _, err := d.bucket.Object(dstKey).CopierFrom(srcObj).Run(ctx); err != nil {
		return fail("move", src, err)
	}
	if err := srcObj.Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return fail("move: delete source", src, err)
	}
	return nil
}

// SignedURL returns a V4 signed GET URL for the file at p, valid for expiry,
// signed locally with the service account key of keyfile or credentials. It
// sends no request. Without such a key (Application Default Credentials, an
// unauthenticated emulator) it returns an error wrapping
// errors.ErrUnsupported at once: asking the IAM API to sign each URL would
// cost a request per blob GET, which is what a redirect is meant to save.
func (d *Driver) SignedURL(_ context.Context, p string, expiry time.Duration) (string, error) {
	key, err := d.fileKey(p)
	if err != nil {
		return "", err
	}
	if d.signer == nil {
		return "", fmt.Errorf("gcs: no service account private key to sign URLs with: %w", errors.ErrUnsupported)
	}
	opts := *d.signer
	opts.Method = http.MethodGet
	opts.Expires = time.Now().Add(expiry)
	u, err := d.bucket.SignedURL(key, &opts)
	if err != nil {
		return "", fmt.Errorf("gcs: sign %s: %w", p, err)
	}
	return u, nil
}

// urlSigner returns the options that sign URLs with the service account key
// in credentials (JSON), or nil when it holds none. endpoint, when set, is
// where the signed URLs point (an emulator).
func urlSigner(credentials []byte, endpoint string) (*storage.SignedURLOptions, error) {
	var sa struct {
		Email      string `json:"client_email"`
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(credentials, &sa); err != nil {
		return nil, fmt.Errorf("gcs: credentials: %w", err)
	}
	if sa.Email == "" || sa.PrivateKey == "" {
		return nil, nil
	}
	opts := &storage.SignedURLOptions{
		GoogleAccessID: sa.Email,
		PrivateKey:     []byte(sa.PrivateKey),
		Scheme:         storage.SigningSchemeV4,
	}
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("gcs: endpoint %q is not a URL", endpoint)
		}
		opts.Hostname = u.Host
		opts.Insecure = u.Scheme == "http"
	}
	return opts, nil
}
