package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"
)

// Sizes of S3 transfers. A put holds at most PutConcurrency parts in
// memory; a sequential read at most ReadAhead+2 ranges (ReadAhead+1 GETs in
// flight and the one being read).
const (
	DefaultPartSize  = 16 << 20 // bytes per multipart part (S3: 5 MiB to 5 GiB)
	DefaultRangeSize = 8 << 20  // bytes per ranged GET of a sequential read
	PutConcurrency   = 4
	ReadAhead        = 2
	rangeAttempts    = 5 // tries of one range (the SDK's retries inside each)
	// maxParts is S3's limit of parts per upload: a stream Put stores at
	// most maxParts*DefaultPartSize bytes (156 GiB); PutFile sizes its
	// parts to fit.
	maxParts = 10000
)

// S3Options configure an S3 store. Everything else (credentials, region,
// retries) comes from the AWS SDK's default chain: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_PROFILE and
// ~/.aws, web identity (Kubernetes IRSA), container and instance roles.
type S3Options struct {
	// Endpoint is the S3 API's base URL for S3-compatible stores (MinIO,
	// R2, Ceph, versitygw): EndpointFromEnv reads it as the SDKs do.
	// Given, addressing is path-style (http://HOST/BUCKET/KEY) and the
	// region defaults to us-east-1. Empty: AWS S3 itself.
	Endpoint string
	// Region overrides the SDK's (AWS_REGION).
	Region string
	// PartSize and RangeSize override DefaultPartSize and DefaultRangeSize.
	PartSize, RangeSize int64
	// HTTPClient, when set, makes the requests.
	HTTPClient *http.Client
}

// EndpointFromEnv is the S3 endpoint the AWS SDKs use: AWS_ENDPOINT_URL_S3,
// else AWS_ENDPOINT_URL, neither when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS
// is true.
func EndpointFromEnv(getenv func(string) string) string {
	if strings.EqualFold(getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		return ""
	}
	if e := getenv("AWS_ENDPOINT_URL_S3"); e != "" {
		return e
	}
	return getenv("AWS_ENDPOINT_URL")
}

// S3 is a Store under a prefix of a bucket.
type S3 struct {
	client    *s3.Client
	bucket    string
	prefix    string // "" or ending in "/"
	where     string // for messages: s3://bucket/prefix at endpoint
	partSize  int64
	rangeSize int64
	// rangeWait is the wait before a range's second try (attempt²
	// times it before later ones); tests shorten it.
	rangeWait time.Duration
}

// NewS3 is the store under prefix in bucket. It makes no request: Check
// does.
func NewS3(ctx context.Context, bucket, prefix string, o S3Options) (*S3, error) {
	var opts []func(*config.LoadOptions) error
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("S3 configuration: %w", err)
	}
	if cfg.Region == "" {
		if o.Endpoint == "" {
			return nil, fmt.Errorf("S3: no region: set AWS_REGION (or AWS_ENDPOINT_URL_S3 for an S3-compatible store)")
		}
		cfg.Region = "us-east-1"
	}
	where := "s3://" + bucket + "/" + prefix
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("S3 endpoint %q: want a URL such as http://127.0.0.1:9000", redact(o.Endpoint))
		}
		where += " at " + redact(o.Endpoint)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		// Ranged GETs have no whole-object checksum to validate: the SDK
		// would log that to stderr for every range.
		so.DisableLogOutputChecksumValidationSkipped = true
		if o.HTTPClient != nil {
			so.HTTPClient = o.HTTPClient
		}
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
			so.UsePathStyle = true
		}
	})
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	s := &S3{client: client, bucket: bucket, prefix: prefix, where: where,
		partSize: DefaultPartSize, rangeSize: DefaultRangeSize, rangeWait: 200 * time.Millisecond}
	if o.PartSize > 0 {
		s.partSize = max(o.PartSize, 5<<20)
	}
	if o.RangeSize > 0 {
		s.rangeSize = o.RangeSize
	}
	return s, nil
}

// redact drops credentials from a URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}

func (s *S3) String() string { return s.where }

// Check makes one request that needs the bucket and working credentials,
// and says clearly what is wrong when it fails. Credentials that are valid
// but may not list the bucket pass: they may still read and write the
// objects a job needs (the operations themselves then tell).
func (s *S3) Check(ctx context.Context) error {
	_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix), MaxKeys: aws.Int32(1)})
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "AccessDenied" {
		return nil
	}
	return s.explain("", err)
}

// explain turns an SDK error into one that says what to fix.
func (s *S3) explain(key string, err error) error {
	return explainRemote(s.where, s.bucket, "s3://"+s.bucket+"/"+s.prefix, key, err, classifyS3)
}

const s3CredentialsHint = ": check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN"

// classifyS3 reads the SDK's and the service's errors (see classify).
func classifyS3(err error) (detail string, kind error) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return "", ErrNotExist
		case "NoSuchBucket":
			return "", ErrNoBucket
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken", "Forbidden", "InvalidClientTokenId":
			return "(" + ae.ErrorCode() + ")" + s3CredentialsHint, ErrCredentials
		}
		return ae.ErrorCode() + ": " + ae.ErrorMessage(), nil
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return "", ErrNotExist
		case http.StatusForbidden:
			return "(HTTP 403)" + s3CredentialsHint, ErrCredentials
		}
	}
	return "", nil
}

// Errors of a store that cannot work as configured.
var (
	ErrNoBucket    = errors.New("no such bucket")
	ErrCredentials = errors.New("the credentials were refused")
	ErrUnreachable = errors.New("cannot reach the endpoint")
)

func (s *S3) key(key string) (*string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return aws.String(s.prefix + key), nil
}

func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	k, err := s.key(key)
	if err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: k})
	if err != nil {
		return Info{}, s.explain(key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified), ETag: aws.ToString(out.ETag)}, nil
}

func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: k})
	if err = s.explain(key, err); errors.Is(err, ErrNotExist) {
		return nil
	}
	return err
}

func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	p := paginatorFor(s, prefix)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return s.explain("", err)
		}
		for _, o := range page.Contents {
			in := Info{Key: strings.TrimPrefix(aws.ToString(o.Key), s.prefix), Size: aws.ToInt64(o.Size),
				ModTime: aws.ToTime(o.LastModified), ETag: aws.ToString(o.ETag)}
			if err := fn(in); err != nil {
				return err
			}
		}
	}
	return nil
}

func paginatorFor(s *S3, prefix string) *s3.ListObjectsV2Paginator {
	return s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
}

// ReadRange is one ranged GET.
func (s *S3) ReadRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return s.getRange(ctx, key, off, n, "")
}

func (s *S3) getRange(ctx context.Context, key string, off, n int64, etag string) (io.ReadCloser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: k, Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))}
	if etag != "" {
		in.IfMatch = aws.String(etag)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange" {
			return io.NopCloser(bytes.NewReader(nil)), nil // off at or past the end
		}
		if errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed" {
			return nil, fmt.Errorf("s3://%s/%s%s changed while it was read (its ETag is no longer %s)", s.bucket, s.prefix, key, etag)
		}
		return nil, s.explain(key, err)
	}
	return out.Body, nil
}

// Open reads the object sequentially in ranged GETs of RangeSize bytes,
// up to ReadAhead+1 GETs at once ahead of the reader, each range retried on failure; the
// object must keep its ETag while it is read.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, Info{}, err
	}
	return newRangeReader(ctx, s, key, info), info, nil
}

// rangeReader is a sequential reader of ranges fetched ahead: up to
// ReadAhead+1 ranged GETs run at once, and their ranges are read in order.
type rangeReader struct {
	cancel context.CancelFunc
	queue  chan chan rangeBuf // one per range, in order
	free   chan []byte
	cur    []byte
	buf    []byte // backing array of cur
	err    error
	wg     sync.WaitGroup
}

type rangeBuf struct {
	b   []byte
	err error
}

func newRangeReader(ctx context.Context, s *S3, key string, info Info) *rangeReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &rangeReader{cancel: cancel, queue: make(chan chan rangeBuf, ReadAhead), free: make(chan []byte, ReadAhead+2)}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(r.queue)
		for off := int64(0); off < info.Size; off += s.rangeSize {
			n := min(s.rangeSize, info.Size-off)
			ch := make(chan rangeBuf, 1)
			select {
			case r.queue <- ch: // waits while ReadAhead ranges are ahead
			case <-ctx.Done():
				return
			}
			var b []byte
			select {
			case b = <-r.free:
			default:
				b = make([]byte, 0, n) // the first range's size: a small object gets a small buffer
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				b, err := s.fetchRange(ctx, key, off, n, info.ETag, b)
				ch <- rangeBuf{b, err}
			}()
		}
	}()
	return r
}

// fetchRange reads the range [off, off+n) whole into b, trying again
// after a failure (a GET refused or a body cut short).
func (s *S3) fetchRange(ctx context.Context, key string, off, n int64, etag string, b []byte) ([]byte, error) {
	var last error
	for attempt := range rangeAttempts {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt*attempt) * s.rangeWait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		body, err := s.getRange(ctx, key, off, n, etag)
		if err == nil {
			if int64(cap(b)) < n {
				b = make([]byte, n)
			}
			b = b[:n]
			_, err = io.ReadFull(body, b)
			body.Close()
			if err == nil {
				return b, nil
			}
			err = fmt.Errorf("range at byte %d: %w", off, err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrNotExist) || errors.Is(err, ErrNoBucket) || errors.Is(err, ErrCredentials) || strings.Contains(err.Error(), "changed while it was read") {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("read s3://%s/%s%s at byte %d (%d tries): %w", s.bucket, s.prefix, key, off, rangeAttempts, last)
}

func (r *rangeReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.buf != nil {
			select {
			case r.free <- r.buf[:0]:
			default:
			}
			r.buf = nil
		}
		ch, ok := <-r.queue
		if !ok {
			r.err = io.EOF
			return 0, io.EOF
		}
		rb := <-ch
		if rb.err != nil {
			r.err = rb.err
			r.cancel() // the ranges after it are not wanted
			return 0, rb.err
		}
		r.cur, r.buf = rb.b, rb.b
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *rangeReader) Close() error {
	r.cancel()
	for range r.queue { // let the producer end
	}
	r.wg.Wait()
	if r.err == nil {
		r.err = errors.New("objstore: read after Close")
	}
	return nil
}

// PutFile uploads a local file: one PUT when it fits in a part, else a
// multipart upload of its sections (read from the file, not buffered).
func (s *S3) PutFile(ctx context.Context, key, path string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	// S3 allows 10,000 parts: a file too big for that gets bigger parts.
	partSize := max(s.partSize, (size/maxParts+1+(1<<20)-1)&^((1<<20)-1))
	if size <= partSize {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: k,
			Body: io.NewSectionReader(f, 0, size), ContentLength: aws.Int64(size)})
		return s.explain(key, err)
	}
	off := int64(0)
	return s.multipart(ctx, key, k, func() (io.ReadSeeker, int64, func(), error) {
		if off >= size {
			return nil, 0, nil, io.EOF
		}
		n := min(partSize, size-off)
		body := io.NewSectionReader(f, off, n)
		off += n
		return body, n, func() {}, nil
	})
}

// Put uploads what r yields: one PUT when it is at most one part, else a
// multipart upload completed only after every part is stored, and aborted
// when anything fails (nothing appears under key). It holds at most
// PutConcurrency parts in memory.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	var first bytes.Buffer
	if _, err := io.CopyN(&first, ctxReader{ctx, r}, s.partSize+1); err != nil && err != io.EOF {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if int64(first.Len()) <= s.partSize { // all of it fits in one PUT
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: k,
			Body: bytes.NewReader(first.Bytes()), ContentLength: aws.Int64(int64(first.Len()))})
		return s.explain(key, err)
	}
	// The byte read past the first part starts the second.
	pending := first.Bytes()
	src := io.MultiReader(bytes.NewReader(pending[s.partSize:]), ctxReader{ctx, r})
	pending = pending[:s.partSize]
	bufs := make(chan []byte, PutConcurrency) // the first part's buffer and PutConcurrency-1 more
	for range PutConcurrency - 1 {
		bufs <- nil
	}
	return s.multipart(ctx, key, k, func() (io.ReadSeeker, int64, func(), error) {
		if pending != nil {
			b := pending
			pending = nil
			return bytes.NewReader(b), int64(len(b)), func() { bufs <- b[:0] }, nil
		}
		buf := <-bufs
		if cap(buf) < int(s.partSize) {
			buf = make([]byte, s.partSize)
		}
		buf = buf[:s.partSize]
		n, err := io.ReadFull(src, buf)
		switch {
		case err == io.EOF:
			bufs <- buf
			return nil, 0, nil, io.EOF
		case err != nil && err != io.ErrUnexpectedEOF:
			bufs <- buf
			return nil, 0, nil, fmt.Errorf("put %s: %w", key, err)
		}
		return bytes.NewReader(buf[:n]), int64(n), func() { bufs <- buf }, nil
	})
}

// multipart uploads the parts next yields (io.EOF after the last one),
// PutConcurrency at once; release is called once a part is sent. The
// upload is completed only when every part is stored, and aborted when
// anything fails.
func (s *S3) multipart(ctx context.Context, key string, k *string, next func() (body io.ReadSeeker, n int64, release func(), err error)) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Created even when ctx ends meanwhile, so that its id is known and
	// the upload can be aborted below.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	up, err := s.client.CreateMultipartUpload(cctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: k,
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	cancel()
	if err != nil {
		return s.explain(key, err)
	}
	defer func() {
		if err != nil {
			// Nothing appears under the key; the parts are let go. A
			// process killed before this leaves an incomplete upload that
			// is invisible under the key (a bucket lifecycle rule for
			// incomplete multipart uploads removes its parts).
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_, aerr := s.client.AbortMultipartUpload(actx,
				&s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: k, UploadId: up.UploadId})
			if aerr != nil {
				err = fmt.Errorf("%w (and aborting the multipart upload failed: %v)", err, s.explain(key, aerr))
			}
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(PutConcurrency)
	var mu sync.Mutex
	var parts []types.CompletedPart
	for num := int32(1); ; num++ {
		if gctx.Err() != nil {
			break
		}
		body, n, release, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			g.Wait()
			return err
		}
		part := num
		g.Go(func() error {
			defer release()
			out, err := s.client.UploadPart(gctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: k, UploadId: up.UploadId,
				PartNumber: aws.Int32(part), Body: body, ContentLength: aws.Int64(n),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
			if err != nil {
				return s.explain(key, err)
			}
			mu.Lock()
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(part), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
			mu.Unlock()
			return nil
		})
	}
	if err := waitErr(g, ctx); err != nil {
		return err
	}
	sortParts(parts)
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: k,
		UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	return s.explain(key, err)
}

// AbortIncomplete aborts the incomplete multipart uploads to key: what a
// put killed mid-upload left (invisible under the key, but its parts are
// stored and billed). Only for a key one writer owns (a job's output).
func (s *S3) AbortIncomplete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	out, err := s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: k})
	if err != nil {
		return s.explain(key, err)
	}
	for _, u := range out.Uploads {
		if aws.ToString(u.Key) != *k {
			continue
		}
		if _, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: k, UploadId: u.UploadId}); err != nil {
			if e := s.explain(key, err); !errors.Is(e, ErrNotExist) {
				return e
			}
		}
	}
	return nil
}

// waitErr waits for the group: its first error, else that of ctx (the
// put's: a cancelled put must not complete).
func waitErr(g *errgroup.Group, ctx context.Context) error {
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

func sortParts(p []types.CompletedPart) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && aws.ToInt32(p[j].PartNumber) < aws.ToInt32(p[j-1].PartNumber); j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}
