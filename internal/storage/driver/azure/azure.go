// Package azure is cairn's storage driver for Azure Blob Storage (and
// Azurite). Paths map to blob names as rootdirectory + path, like
// distribution's azure driver, so an existing container is served as is;
// directories are implied by name prefixes.
//
// Files are block blobs. PutContent is one Put Blob and Move a server-side
// copy then a delete, so readers see a whole old or new blob. A Writer stages
// blocks and commits the block list on Commit and on Close, which is what lets
// a later Writer append (it re-commits the earlier blocks plus its own).
// DeleteFiles sends blob batch requests of up to 256 deletes, or parallel
// single deletes where the service has no batch API.
package azure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const driverName = "azure"

// Parameters configures the driver. The yaml keys are distribution's azure
// keys plus maxdeleteconcurrency and batchdelete.
type Parameters struct {
	AccountName string `yaml:"accountname"`
	AccountKey  string `yaml:"accountkey"`
	Container   string `yaml:"container"`
	// Realm is the endpoint suffix: the service URL is
	// https://<accountname>.blob.<realm> (default core.windows.net).
	Realm string `yaml:"realm"`
	// ServiceURL overrides the service URL, e.g. Azurite's
	// http://127.0.0.1:10000/devstoreaccount1.
	ServiceURL    string `yaml:"serviceurl"`
	RootDirectory string `yaml:"rootdirectory"`
	// Credentials chooses how requests are authorized, as distribution's
	// credentials.type: shared_key (default: accountname and accountkey),
	// client_secret (a Microsoft Entra application: clientid, tenantid,
	// secret) or default_credentials (azidentity's default chain:
	// environment, workload identity, managed identity, Azure CLI).
	Credentials Credentials `yaml:"credentials"`
	// MaxRetries and RetryDelay are the SDK's retry policy for each
	// request (distribution's max_retries and retry_delay; defaults 10 and
	// 100ms).
	MaxRetries int           `yaml:"max_retries"`
	RetryDelay time.Duration `yaml:"retry_delay"`

	// MaxDeleteConcurrency bounds the single deletes in flight when DeleteFiles
	// cannot use batches (default 64).
	MaxDeleteConcurrency int `yaml:"maxdeleteconcurrency"`
	// BatchDelete is auto (default: batches until the service refuses the
	// first one, then single deletes), true (batches only) or false (single
	// deletes only).
	BatchDelete string `yaml:"batchdelete"`

	// Transport, when set, carries every request (tests count them with it).
	Transport http.RoundTripper `yaml:"-"`
}

// Credentials are distribution's credentials section.
type Credentials struct {
	Type     string `yaml:"type"`
	ClientID string `yaml:"clientid"`
	TenantID string `yaml:"tenantid"`
	Secret   string `yaml:"secret"`
}

// Credential types.
const (
	credSharedKey    = "shared_key"
	credClientSecret = "client_secret"
	credDefault      = "default_credentials"
)

// Defaults.
const (
	defaultRealm                = "core.windows.net"
	defaultMaxDeleteConcurrency = 64
	defaultMaxRetries           = 10
	defaultRetryDelay           = 100 * time.Millisecond
)

// Batch delete modes.
const (
	batchAuto  = "auto"
	batchTrue  = "true"
	batchFalse = "false"
)

// Driver stores files as blobs in one container.
type Driver struct {
	client *container.Client
	// root is the blob name prefix of "/": "" or "some/dir/".
	root       string
	maxDeletes int
	batchMode  string
	// batch is the state of the blob batch API in auto mode: batchUnknown
	// until the first batch answers, then batchWorks or batchRefused.
	batch atomic.Int32
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.FileStater = (*Driver)(nil)
)

// New returns a driver for p. It makes no request: a missing container or a
// wrong key shows in the first call.
func New(_ context.Context, p Parameters) (*Driver, error) {
	if p.AccountName == "" {
		return nil, errors.New("azure: accountname is required")
	}
	if p.Container == "" {
		return nil, errors.New("azure: container is required")
	}
	credType := strings.ToLower(p.Credentials.Type)
	if credType == "" {
		credType = credSharedKey
	}
	switch credType {
	case credSharedKey:
		if p.AccountKey == "" {
			return nil, errors.New("azure: accountkey is required")
		}
	case credClientSecret:
		if c := p.Credentials; c.ClientID == "" || c.TenantID == "" || c.Secret == "" {
			return nil, errors.New("azure: credentials: client_secret needs clientid, tenantid and secret")
		}
	case credDefault:
	default:
		return nil, fmt.Errorf("azure: credentials.type %q is not shared_key, client_secret or default_credentials", p.Credentials.Type)
	}
	if p.MaxRetries < 0 || p.RetryDelay < 0 {
		return nil, errors.New("azure: max_retries and retry_delay must not be negative")
	}
	if p.MaxRetries == 0 {
		p.MaxRetries = defaultMaxRetries
	}
	if p.RetryDelay == 0 {
		p.RetryDelay = defaultRetryDelay
	}
	if p.Realm == "" {
		p.Realm = defaultRealm
	}
	if p.ServiceURL == "" {
		p.ServiceURL = fmt.Sprintf("https://%s.blob.%s", p.AccountName, p.Realm)
	}
	u, err := url.Parse(p.ServiceURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("azure: serviceurl %q is not an http(s) URL", p.ServiceURL)
	}
	if p.MaxDeleteConcurrency < 0 {
		return nil, fmt.Errorf("azure: maxdeleteconcurrency %d is negative", p.MaxDeleteConcurrency)
	}
	if p.MaxDeleteConcurrency == 0 {
		p.MaxDeleteConcurrency = defaultMaxDeleteConcurrency
	}
	mode := strings.ToLower(p.BatchDelete)
	switch mode {
	case "":
		mode = batchAuto
	case batchAuto, batchTrue, batchFalse:
	default:
		return nil, fmt.Errorf("azure: batchdelete %q is not auto, true or false", p.BatchDelete)
	}
	rt := p.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Parallel single deletes and block uploads would otherwise open
		// and drop connections beyond the default idle pool of 2.
		t.MaxIdleConnsPerHost = p.MaxDeleteConcurrency + 16
		t.MaxIdleConns = t.MaxIdleConnsPerHost
		rt = t
	}
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: rt},
		Telemetry: policy.TelemetryOptions{ApplicationID: "cairn"},
		Retry:     policy.RetryOptions{MaxRetries: int32(min(p.MaxRetries, 1<<30)), RetryDelay: p.RetryDelay},
	}}
	containerURL := strings.TrimRight(p.ServiceURL, "/") + "/" + url.PathEscape(p.Container)
	var client *container.Client
	switch credType {
	case credSharedKey:
		cred, err := container.NewSharedKeyCredential(p.AccountName, p.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("azure: accountkey: %w", err)
		}
		client, err = container.NewClientWithSharedKeyCredential(containerURL, cred, opts)
		if err != nil {
			return nil, fmt.Errorf("azure: %w", err)
		}
	default:
		var cred azcore.TokenCredential
		var err error
		if credType == credClientSecret {
			c := p.Credentials
			cred, err = azidentity.NewClientSecretCredential(c.TenantID, c.ClientID, c.Secret, nil)
		} else {
			cred, err = azidentity.NewDefaultAzureCredential(nil)
		}
		if err != nil {
			return nil, fmt.Errorf("azure: credentials: %w", err)
		}
		client, err = container.NewClient(containerURL, cred, opts)
		if err != nil {
			return nil, fmt.Errorf("azure: %w", err)
		}
	}
	root := strings.Trim(p.RootDirectory, "/")
	if root != "" {
		root += "/"
	}
	return &Driver{client: client, root: root, maxDeletes: p.MaxDeleteConcurrency, batchMode: mode}, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return driverName }

// blobName maps a valid path other than "/" to its blob name.
func (d *Driver) blobName(p string) string { return d.root + p[1:] }

// dirPrefix is the blob name prefix of everything below the valid path p.
func (d *Driver) dirPrefix(p string) string {
	if p == "/" {
		return d.root
	}
	return d.root + p[1:] + "/"
}

// pathOf maps a blob name below the root back to its path.
func (d *Driver) pathOf(name string) string { return "/" + name[len(d.root):] }

// filePath checks that p can name a file: a valid path other than "/".
func (d *Driver) filePath(p string) error {
	if p == "/" || !driver.ValidPath(p) {
		return d.invalid(p)
	}
	return nil
}

func (d *Driver) invalid(p string) error { return driver.InvalidPathError{Path: p, Driver: driverName} }

func (d *Driver) notFound(p string) error {
	return driver.PathNotFoundError{Path: p, Driver: driverName}
}

// isNotFound reports an error that means the blob is not there. A missing
// container is not among them: it is a configuration error and must show.
func isNotFound(err error) bool {
	return bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ResourceNotFound, bloberror.CannotVerifyCopySource)
}

// fail turns a service error about p into a PathNotFoundError or a wrapped
// error naming the operation.
func (d *Driver) fail(op, p string, err error) error {
	if isNotFound(err) {
		return d.notFound(p)
	}
	err = fmt.Errorf("%s: %s %s: %w", driverName, op, p, err)
	if re := (*azcore.ResponseError)(nil); errors.As(err, &re) && re.StatusCode == http.StatusForbidden {
		// A role or SAS without the permission (AuthorizationPermissionMismatch and kin).
		return driver.Refused(driver.ErrPermission, err)
	}
	return err
}

func (d *Driver) blob(p string) *blob.Client { return d.client.NewBlobClient(d.blobName(p)) }

// GetContent implements driver.Driver.
func (d *Driver) GetContent(ctx context.Context, p string) ([]byte, error) {
	if !driver.ValidPath(p) {
		return nil, d.invalid(p)
	}
	if p == "/" {
		return nil, d.notFound(p)
	}
	resp, err := d.blob(p).DownloadStream(ctx, nil)
	if err != nil {
		return nil, d.fail("read", p, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, d.fail("read", p, err)
	}
	return b, nil
}

// PutContent implements driver.Driver with one Put Blob, which replaces the
// blob (of any type, with any block list) atomically.
func (d *Driver) PutContent(ctx context.Context, p string, content []byte) error {
	if err := d.filePath(p); err != nil {
		return err
	}
	if len(content) > blockblob.MaxUploadBlobBytes {
		return fmt.Errorf("%s: put %s: %d bytes exceed one Put Blob's %d", driverName, p, len(content), blockblob.MaxUploadBlobBytes)
	}
	body := streaming.NopCloser(bytes.NewReader(content))
	if _, err := d.client.NewBlockBlobClient(d.blobName(p)).Upload(ctx, body, nil); err != nil {
		return d.fail("put", p, err)
	}
	return nil
}

// Reader implements driver.Driver. The common case is one ranged GET; only an
// offset at or past the end costs a second request, to tell the two apart.
func (d *Driver) Reader(ctx context.Context, p string, offset int64) (io.ReadCloser, error) {
	if !driver.ValidPath(p) {
		return nil, d.invalid(p)
	}
	if p == "/" {
		return nil, d.notFound(p)
	}
	if offset < 0 {
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	b := d.blob(p)
	resp, err := b.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: offset}})
	if bloberror.HasCode(err, bloberror.InvalidRange) {
		// Either an offset past the end or one exactly at it (which
		// includes an empty blob read from 0): the latter reads nothing.
		props, perr := b.GetProperties(ctx, nil)
		if perr != nil {
			return nil, d.fail("stat", p, perr)
		}
		if props.ContentLength != nil && *props.ContentLength == offset {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	if err != nil {
		return nil, d.fail("read", p, err)
	}
	// The retry reader resumes a broken stream with If-Match on the ETag, so
	// a blob replaced meanwhile fails instead of mixing two versions.
	return resp.NewRetryReader(ctx, &blob.RetryReaderOptions{EarlyCloseAsError: true}), nil
}

// ReadRange implements driver.Driver with one ranged GET. The service answers
// a range starting at or past the end (an empty blob's too) with
// InvalidRange, the contract's InvalidOffsetError.
func (d *Driver) ReadRange(ctx context.Context, p string, offset, length int64) (io.ReadCloser, error) {
	if !driver.ValidPath(p) {
		return nil, d.invalid(p)
	}
	if p == "/" {
		return nil, d.notFound(p)
	}
	end, err := driver.RangeEnd(driverName, p, offset, length)
	if err != nil {
		return nil, err
	}
	resp, err := d.blob(p).DownloadStream(ctx, &blob.DownloadStreamOptions{
		Range: blob.HTTPRange{Offset: offset, Count: end - offset},
	})
	if bloberror.HasCode(err, bloberror.InvalidRange) {
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	if err != nil {
		return nil, d.fail("read", p, err)
	}
	// Azurite answers a range starting exactly at the end with an empty 206
	// ("bytes 1000-999/1000") where Azure says 416; the size it reports
	// settles it.
	if size, ok := rangeSize(resp.ContentRange); ok && offset >= size {
		resp.Body.Close()
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	// As in Reader, a resumed stream is pinned to the blob's ETag; it asks
	// only for the rest of the range.
	return resp.NewRetryReader(ctx, &blob.RetryReaderOptions{EarlyCloseAsError: true}), nil
}

// rangeSize is the size of the whole blob in a Content-Range header
// ("bytes first-last/size"); ok is false without one.
func rangeSize(cr *string) (size int64, ok bool) {
	if cr == nil {
		return 0, false
	}
	i := strings.LastIndexByte(*cr, '/')
	if i < 0 {
		return 0, false
	}
	size, err := strconv.ParseInt((*cr)[i+1:], 10, 64)
	return size, err == nil
}

// Stat implements driver.Driver: the blob's properties, else a directory if
// any blob name starts with path + "/".
func (d *Driver) Stat(ctx context.Context, p string) (driver.FileInfo, error) {
	if !driver.ValidPath(p) {
		return driver.FileInfo{}, d.invalid(p)
	}
	if p == "/" {
		return driver.FileInfo{Path: p, IsDir: true}, nil
	}
	if fi, err := d.StatFile(ctx, p); !errors.Is(err, driver.ErrNotFound) {
		return fi, err
	}
	found, err := d.anyBelow(ctx, p)
	if err != nil {
		return driver.FileInfo{}, err
	}
	if !found {
		return driver.FileInfo{}, d.notFound(p)
	}
	return driver.FileInfo{Path: p, IsDir: true}, nil
}

// StatFile implements driver.FileStater with the blob's properties alone:
// unlike Stat, a missing blob is not followed by a listing to see whether p
// is a directory.
func (d *Driver) StatFile(ctx context.Context, p string) (driver.FileInfo, error) {
	if !driver.ValidPath(p) {
		return driver.FileInfo{}, d.invalid(p)
	}
	if p == "/" {
		return driver.FileInfo{}, d.notFound(p)
	}
	props, err := d.blob(p).GetProperties(ctx, nil)
	if err != nil {
		return driver.FileInfo{}, d.fail("stat", p, err)
	}
	fi := driver.FileInfo{Path: p}
	if props.ContentLength != nil {
		fi.Size = *props.ContentLength
	}
	if props.LastModified != nil {
		fi.ModTime = *props.LastModified
	}
	return fi, nil
}

// anyBelow reports whether some blob lies below the directory p.
func (d *Driver) anyBelow(ctx context.Context, p string) (bool, error) {
	prefix := d.dirPrefix(p)
	one := int32(1)
	pager := d.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, MaxResults: &one})
	// A page may come back empty with a continuation marker; keep going
	// until something is found or the listing ends.
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return false, d.fail("list", p, err)
		}
		if len(page.Segment.BlobItems) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// List implements driver.Driver with a hierarchical listing.
func (d *Driver) List(ctx context.Context, p string) ([]string, error) {
	if !driver.ValidPath(p) {
		return nil, d.invalid(p)
	}
	prefix := d.dirPrefix(p)
	pager := d.client.NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: &prefix})
	var out []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, d.fail("list", p, err)
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name != nil {
				out = append(out, d.pathOf(*it.Name))
			}
		}
		for _, it := range page.Segment.BlobPrefixes {
			if it.Name != nil {
				out = append(out, strings.TrimSuffix(d.pathOf(*it.Name), "/"))
			}
		}
	}
	if len(out) == 0 && p != "/" {
		return nil, d.notFound(p)
	}
	// The service orders "a/" after "a-b"; paths order "/a" before "/a-b".
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Move implements driver.Driver: a server-side copy, polled until done, then
// a delete of the source. The copy replaces the destination blob whole.
func (d *Driver) Move(ctx context.Context, src, dst string) error {
	if err := d.filePath(src); err != nil {
		return err
	}
	if err := d.filePath(dst); err != nil {
		return err
	}
	srcBlob, dstBlob := d.blob(src), d.blob(dst)
	if src == dst {
		// Copying onto itself and deleting the source would lose the file.
		if _, err := srcBlob.GetProperties(ctx, nil); err != nil {
			return d.fail("stat", src, err)
		}
		return nil
	}
	resp, err := dstBlob.StartCopyFromURL(ctx, srcBlob.URL(), nil)
	if err != nil {
		return d.fail("copy", src, err)
	}
	status := blob.CopyStatusTypeSuccess
	if resp.CopyStatus != nil {
		status = *resp.CopyStatus
	}
	// Copies within one account usually finish at once; a pending one is
	// polled with a growing delay, bounded by ctx.
	for delay := 50 * time.Millisecond; status == blob.CopyStatusTypePending; delay = min(2*delay, 2*time.Second) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: copy %s to %s: %w", driverName, src, dst, ctx.Err())
		case <-time.After(delay):
		}
		props, err := dstBlob.GetProperties(ctx, nil)
		if err != nil {
			return fmt.Errorf("%s: copy %s to %s: %w", driverName, src, dst, err)
		}
		if props.CopyStatus == nil {
			break
		}
		status = *props.CopyStatus
	}
	if status != blob.CopyStatusTypeSuccess {
		return fmt.Errorf("%s: copy %s to %s ended %s", driverName, src, dst, status)
	}
	if _, err := srcBlob.Delete(ctx, nil); err != nil && !isNotFound(err) {
		return d.fail("delete", src, err)
	}
	return nil
}

// Delete implements driver.Driver: the blob at path, else every blob below
// it, found by a flat listing and deleted a page at a time.
func (d *Driver) Delete(ctx context.Context, p string) error {
	if !driver.ValidPath(p) {
		return d.invalid(p)
	}
	if p != "/" {
		_, err := d.blob(p).Delete(ctx, nil)
		if err == nil {
			return nil
		}
		if !isNotFound(err) {
			return d.fail("delete", p, err)
		}
	}
	prefix := d.dirPrefix(p)
	pager := d.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	found := false
	var errs []error
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return errors.Join(append(errs, d.fail("list", p, err))...)
		}
		names := make([]string, 0, len(page.Segment.BlobItems))
		for _, it := range page.Segment.BlobItems {
			if it.Name != nil {
				names = append(names, *it.Name)
			}
		}
		found = found || len(names) > 0
		if _, err := d.deleteNames(ctx, names); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !found && p != "/" {
		return d.notFound(p)
	}
	return nil
}

// SignedURL returns a URL with a read-only service SAS for the blob at p,
// valid for expiry, signed locally with the account key (Azurite checks it
// as Azure does). It sends no request.
func (d *Driver) SignedURL(_ context.Context, p string, expiry time.Duration) (string, error) {
	if p == "/" || !driver.ValidPath(p) {
		return "", d.invalid(p)
	}
	u, err := d.blob(p).GetSASURL(sas.BlobPermissions{Read: true}, time.Now().Add(expiry), nil)
	if err != nil {
		return "", fmt.Errorf("azure: sign %s: %w", p, err)
	}
	return u, nil
}
