package s3

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Parameters configure the driver. The yaml keys are distribution's, so its
// storage.s3 section works unchanged; maxdeleteconcurrency and
// deletebatchsize are cairn's.
type Parameters struct {
	Region         string `yaml:"region"`
	RegionEndpoint string `yaml:"regionendpoint"` // e.g. http://127.0.0.1:9000 for MinIO
	Bucket         string `yaml:"bucket"`
	AccessKey      string `yaml:"accesskey"` // empty: the SDK's default chain (env, files, IAM role)
	SecretKey      string `yaml:"secretkey"`
	SessionToken   string `yaml:"sessiontoken"`
	ForcePathStyle bool   `yaml:"forcepathstyle"` // MinIO and most self-hosted stores need it
	// Secure selects https for a regionendpoint without a scheme, and for
	// AWS's own endpoints. Unset means true.
	Secure        *bool  `yaml:"secure"`
	SkipVerify    bool   `yaml:"skipverify"`
	RootDirectory string `yaml:"rootdirectory"`

	ChunkSize                   int64 `yaml:"chunksize"` // multipart part size; >= 5 MiB, default 10 MiB
	MultipartCopyThresholdSize  int64 `yaml:"multipartcopythresholdsize"`
	MultipartCopyChunkSize      int64 `yaml:"multipartcopychunksize"`
	MultipartCopyMaxConcurrency int   `yaml:"multipartcopymaxconcurrency"`

	StorageClass string `yaml:"storageclass"` // "" or NONE: the bucket's default
	ObjectACL    string `yaml:"objectacl"`    // canned ACL for new objects; "": none sent
	Accelerate   bool   `yaml:"accelerate"`   // S3 Transfer Acceleration endpoints
	UseDualStack bool   `yaml:"usedualstack"` // AWS's IPv6 (dual-stack) endpoints
	// UseFIPSEndpoint selects AWS's FIPS 140 endpoints.
	UseFIPSEndpoint bool `yaml:"usefipsendpoint"`
	// V4Auth is accepted for distribution's configs; requests are always
	// signed with SigV4, so only false (SigV2) is refused.
	V4Auth  *bool  `yaml:"v4auth"`
	Encrypt bool   `yaml:"encrypt"` // SSE-S3, or SSE-KMS with keyid
	KeyID   string `yaml:"keyid"`
	// LogLevel is distribution's: off, debug, debugwithsigning,
	// debugwithhttpbody, debugwithrequestretries, debugwithrequesterrors;
	// several may be joined with commas.
	LogLevel string `yaml:"loglevel"`

	// MaxDeleteConcurrency bounds DeleteObjects requests in flight.
	MaxDeleteConcurrency int `yaml:"maxdeleteconcurrency"`
	// DeleteBatchSize is the keys per DeleteObjects request, at most 1000.
	DeleteBatchSize int `yaml:"deletebatchsize"`
	// MaxAttempts bounds the tries of one request (and of a key a
	// DeleteObjects response reports as throttled).
	MaxAttempts int `yaml:"maxattempts"`

	// Transport, when set, carries every request (tests count them with it).
	Transport http.RoundTripper `yaml:"-"`
}

// Defaults, as distribution's where it has one.
const (
	DefaultChunkSize                   = 10 << 20
	DefaultMultipartCopyThresholdSize  = 32 << 20
	DefaultMultipartCopyChunkSize      = 32 << 20
	DefaultMultipartCopyMaxConcurrency = 100
	DefaultMaxDeleteConcurrency        = 8
	DefaultMaxAttempts                 = 10
	storageClassNone                   = "NONE"
)

func (p Parameters) withDefaults() (Parameters, error) {
	if p.Bucket == "" {
		return p, errors.New("s3: bucket is required")
	}
	if (p.AccessKey == "") != (p.SecretKey == "") {
		return p, errors.New("s3: accesskey and secretkey go together")
	}
	setDefault(&p.ChunkSize, DefaultChunkSize)
	setDefault(&p.MultipartCopyThresholdSize, DefaultMultipartCopyThresholdSize)
	setDefault(&p.MultipartCopyChunkSize, DefaultMultipartCopyChunkSize)
	setDefault(&p.MultipartCopyMaxConcurrency, DefaultMultipartCopyMaxConcurrency)
	setDefault(&p.MaxDeleteConcurrency, DefaultMaxDeleteConcurrency)
	setDefault(&p.DeleteBatchSize, maxBatchKeys)
	setDefault(&p.MaxAttempts, DefaultMaxAttempts)
	switch {
	case p.ChunkSize < minPartSize || p.ChunkSize > maxPartSize:
		return p, fmt.Errorf("s3: chunksize %d is outside [%d, %d]", p.ChunkSize, minPartSize, maxPartSize)
	case p.MultipartCopyChunkSize < minPartSize || p.MultipartCopyChunkSize > maxPartSize:
		return p, fmt.Errorf("s3: multipartcopychunksize %d is outside [%d, %d]", p.MultipartCopyChunkSize, minPartSize, maxPartSize)
	case p.MultipartCopyThresholdSize < 0 || p.MultipartCopyThresholdSize > maxPartSize:
		return p, fmt.Errorf("s3: multipartcopythresholdsize %d is outside [0, %d]", p.MultipartCopyThresholdSize, maxPartSize)
	case p.MultipartCopyMaxConcurrency < 1, p.MaxDeleteConcurrency < 1, p.MaxAttempts < 1:
		return p, errors.New("s3: multipartcopymaxconcurrency, maxdeleteconcurrency and maxattempts must be positive")
	case p.DeleteBatchSize < 1 || p.DeleteBatchSize > maxBatchKeys:
		return p, fmt.Errorf("s3: deletebatchsize %d is outside [1, %d]", p.DeleteBatchSize, maxBatchKeys)
	case p.V4Auth != nil && !*p.V4Auth:
		return p, errors.New("s3: v4auth: false (signature version 2) is not supported")
	case p.KeyID != "" && !p.Encrypt:
		return p, errors.New("s3: keyid needs encrypt: true")
	}
	return p, nil
}

func setDefault[T int | int64](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// NewClient returns the SDK client a driver with parameters p uses: the
// endpoint, credentials, retries and checksum settings below. Tools use it
// for bucket administration (create, empty, remove).
func NewClient(ctx context.Context, p Parameters, optFns ...func(*s3.Options)) (*s3.Client, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	secure := p.Secure == nil || *p.Secure
	logMode, err := parseLogLevel(p.LogLevel)
	if err != nil {
		return nil, err
	}
	// A BuildableClient, so that the config loader can add AWS_CA_BUNDLE.
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		// Parts, copies and deletes run many requests at once.
		tr.MaxIdleConnsPerHost = max(p.MultipartCopyMaxConcurrency, p.MaxDeleteConcurrency, 64)
		if p.SkipVerify {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{}
			}
			tr.TLSClientConfig.InsecureSkipVerify = true
		}
	})
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithClientLogMode(logMode),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = p.MaxAttempts
				// Throttling is the one error a bulk delete is sure to
				// meet; a client-side retry quota would turn it into
				// failures instead of waiting.
				o.RateLimiter = ratelimit.None
			})
		}),
		// The SDK's default CRC32 checksums on every upload are not
		// understood by all S3-compatible stores; send checksums only
		// where S3 requires one (DeleteObjects, which also gets a
		// Content-MD5 below).
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if p.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(p.Region))
	}
	if p.AccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(p.AccessKey, p.SecretKey, p.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3: loading AWS config: %w", err)
	}
	if cfg.Region == "" {
		if p.RegionEndpoint == "" {
			return nil, errors.New("s3: region is required")
		}
		// Self-hosted stores accept any region in the signature.
		cfg.Region = "us-east-1"
	}
	opts := []func(*s3.Options){func(o *s3.Options) {
		o.UsePathStyle = p.ForcePathStyle
		o.UseAccelerate = p.Accelerate
		if p.UseDualStack {
			o.EndpointOptions.UseDualStackEndpoint = aws.DualStackEndpointStateEnabled
		}
		if p.UseFIPSEndpoint {
			o.EndpointOptions.UseFIPSEndpoint = aws.FIPSEndpointStateEnabled
		}
		o.EndpointOptions.DisableHTTPS = !secure
		o.DisableLogOutputChecksumValidationSkipped = true
		if p.Transport != nil {
			o.HTTPClient = &http.Client{Transport: p.Transport}
		}
		if ep := p.RegionEndpoint; ep != "" {
			if !strings.Contains(ep, "://") {
				ep = map[bool]string{true: "https://", false: "http://"}[secure] + ep
			}
			o.BaseEndpoint = aws.String(ep)
		}
	}}
	return s3.NewFromConfig(cfg, append(opts, optFns...)...), nil
}

func parseLogLevel(s string) (aws.ClientLogMode, error) {
	var mode aws.ClientLogMode
	for l := range strings.SplitSeq(s, ",") {
		switch strings.ToLower(strings.TrimSpace(l)) {
		case "", "off":
		case "debug":
			mode |= aws.LogRequest | aws.LogResponse
		case "debugwithsigning":
			mode |= aws.LogSigning
		case "debugwithhttpbody":
			mode |= aws.LogRequestWithBody | aws.LogResponseWithBody
		case "debugwithrequestretries":
			mode |= aws.LogRetries
		case "debugwithrequesterrors":
			mode |= aws.LogRetries | aws.LogResponse
		default:
			return 0, fmt.Errorf("s3: unknown loglevel %q", l)
		}
	}
	return mode, nil
}

// withContentMD5 is a per-call option that adds Content-MD5 to a request
// (DeleteObjects). S3 takes the SDK's CRC32 header, but older Ceph RGW and
// some other compatible stores insist on Content-MD5, which all accept.
func withContentMD5(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, addContentMD5)
}

func addContentMD5(stack *middleware.Stack) error {
	return stack.Build.Add(middleware.BuildMiddlewareFunc("cairnContentMD5",
		func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			req, ok := in.Request.(*smithyhttp.Request)
			if !ok || !req.IsStreamSeekable() {
				return next.HandleBuild(ctx, in)
			}
			h := md5.New()
			if _, err := io.Copy(h, req.GetStream()); err != nil {
				return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("s3: hashing the request body: %w", err)
			}
			if err := req.RewindStream(); err != nil {
				return middleware.BuildOutput{}, middleware.Metadata{}, err
			}
			req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(h.Sum(nil)))
			return next.HandleBuild(ctx, in)
		}), middleware.After)
}

// wrap turns a missing key into PathNotFoundError and prefixes the rest.
func (d *Driver) wrap(p string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
		switch code {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return driver.PathNotFoundError{Path: p, Driver: driverName}
		}
	}
	err = fmt.Errorf("%s: %s: %w", driverName, p, err)
	switch {
	case code == "XMinioStorageFull", code == "XMinioAdminBucketQuotaExceeded", code == "QuotaExceeded":
		return driver.Refused(driver.ErrNoSpace, err)
	case code == "AccessDenied", code == "AllAccessDisabled", httpStatus(err) == http.StatusForbidden:
		// A policy or credentials without the right to write (or read).
		return driver.Refused(driver.ErrPermission, err)
	}
	return err
}

// httpStatus is the status code of the response err came from, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// backoff is an exponential backoff with full jitter.
type backoff struct {
	base, max time.Duration
	attempts  int
}

// delay is the wait before retry number n (1-based).
func (b backoff) delay(n int, rnd float64) time.Duration {
	d := b.base << min(n-1, 30)
	if d <= 0 || d > b.max {
		d = b.max
	}
	return time.Duration(rnd * float64(d))
}
