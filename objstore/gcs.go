package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"cloud.google.com/go/storage"
	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// GCSOptions configure a Cloud Storage store. Emulator names a
// GCS-compatible server (fake-gcs-server, `sluice emulate`'s tests), to
// which no credentials are sent; else the credentials are Application
// Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the
// metadata server), unless AccessToken is given.
//
// Google's client reads STORAGE_EMULATOR_HOST itself, and there is no
// turning that off: with it set and Emulator empty, the client still goes
// to that server (docs/architecture.md names this exception). sluice
// passes the variable as Emulator.
type GCSOptions struct {
	// Emulator is the host:port (or URL) of a GCS-compatible server to use
	// instead of Cloud Storage, without credentials (sluice passes
	// $STORAGE_EMULATOR_HOST).
	Emulator string
	// AccessToken, when set, is sent as the OAuth2 bearer token instead of
	// Application Default Credentials (sluice passes
	// $GOOGLE_OAUTH_ACCESS_TOKEN, as Terraform's Google provider reads it).
	AccessToken string
	// HTTPClient, when set, makes the requests (and carries the
	// credentials itself).
	HTTPClient *http.Client
}

// GCS is a Store under a prefix of a Cloud Storage bucket, through the
// official client (cloud.google.com/go/storage): resumable uploads that
// appear only when complete, reads pinned to one generation of an object.
type GCS struct {
	client *storage.Client
	bucket *storage.BucketHandle
	name   string // bucket
	prefix string // "" or ending in "/"
	where  string
}

// NewGCS is the store under prefix in bucket. It makes no request: Check
// does.
func NewGCS(ctx context.Context, bucket, prefix string, o GCSOptions) (*GCS, error) {
	var opts []option.ClientOption
	emu := o.Emulator
	switch {
	case o.HTTPClient != nil:
		opts = append(opts, option.WithHTTPClient(o.HTTPClient))
	case emu != "":
		opts = append(opts, option.WithoutAuthentication())
	case o.AccessToken != "":
		opts = append(opts, option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: o.AccessToken, TokenType: "Bearer"})))
	}
	if emu != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimRight(emuURL(emu), "/")+"/storage/v1/"))
	}
	c, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("the Cloud Storage client: %w", err)
	}
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	where := "gs://" + bucket + "/" + prefix
	if emu != "" {
		where += " at " + redact(emuURL(emu))
	}
	return &GCS{client: c, bucket: c.Bucket(bucket), name: bucket, prefix: prefix, where: where}, nil
}

func emuURL(h string) string {
	if strings.Contains(h, "://") {
		return h
	}
	return "http://" + h
}

func (g *GCS) String() string { return g.where }

// Close lets the client's connections go.
func (g *GCS) Close() error { return g.client.Close() }

// Check lists at most one object under the prefix: the bucket must exist
// and the credentials work. A 403 passes (as for S3): credentials that
// may not list may still read and write the objects a job needs.
func (g *GCS) Check(ctx context.Context) error {
	it := g.bucket.Objects(ctx, &storage.Query{Prefix: g.prefix})
	it.PageInfo().MaxSize = 1
	_, err := it.Next()
	if err == iterator.Done {
		return nil
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) && ge.Code == http.StatusForbidden {
		return nil
	}
	return g.explain("", err)
}

// explain turns a client error into one that says what to fix, wrapping
// this package's errors (ErrNotExist, ErrNoBucket, ErrCredentials,
// ErrUnreachable).
func (g *GCS) explain(key string, err error) error {
	return explainRemote(g.where, g.name, "gs://"+g.name+"/"+g.prefix, key, err, classifyGCS)
}

// classifyGCS reads the client's and the service's errors (see classify).
func classifyGCS(err error) (detail string, kind error) {
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		return "", ErrNotExist
	case errors.Is(err, storage.ErrBucketNotExist):
		return "", ErrNoBucket
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return "", nil
	}
	switch ge.Code {
	case http.StatusNotFound:
		if strings.Contains(strings.ToLower(ge.Message), "bucket") {
			return "", ErrNoBucket
		}
		return "", ErrNotExist
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Sprintf("(HTTP %d): check GOOGLE_OAUTH_ACCESS_TOKEN or Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login)", ge.Code), ErrCredentials
	}
	return fmt.Sprintf("HTTP %d: %s", ge.Code, ge.Message), nil
}

func (g *GCS) object(key string) (*storage.ObjectHandle, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return g.bucket.Object(g.prefix + key), nil
}

func (g *GCS) Stat(ctx context.Context, key string) (Info, error) {
	o, err := g.object(key)
	if err != nil {
		return Info{}, err
	}
	a, err := o.Attrs(ctx)
	if err != nil {
		return Info{}, g.explain(key, err)
	}
	return g.info(a), nil
}

// info describes an object; its ETag is its generation, which changes
// whenever its content does.
func (g *GCS) info(a *storage.ObjectAttrs) Info {
	return Info{Key: strings.TrimPrefix(a.Name, g.prefix), Size: a.Size, ModTime: a.Updated,
		ETag: strconv.FormatInt(a.Generation, 10)}
}

func (g *GCS) Delete(ctx context.Context, key string) error {
	o, err := g.object(key)
	if err != nil {
		return err
	}
	if err = g.explain(key, o.Delete(ctx)); errors.Is(err, ErrNotExist) {
		return nil
	}
	return err
}

func (g *GCS) List(ctx context.Context, prefix string, fn func(Info) error) error {
	it := g.bucket.Objects(ctx, &storage.Query{Prefix: g.prefix + prefix})
	for {
		a, err := it.Next()
		if err == iterator.Done {
			return nil
		}
		if err != nil {
			return g.explain("", err)
		}
		if err := fn(g.info(a)); err != nil {
			return err
		}
	}
}

// Open reads the object as it is now: the read is pinned to its current
// generation, so an object replaced meanwhile fails the read rather than
// mixing two contents. The client streams (and resumes a broken
// connection at the offset reached); nothing is held whole.
func (g *GCS) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	o, err := g.object(key)
	if err != nil {
		return nil, Info{}, err
	}
	a, err := o.Attrs(ctx)
	if err != nil {
		return nil, Info{}, g.explain(key, err)
	}
	r, err := o.Generation(a.Generation).NewReader(ctx)
	if err != nil {
		return nil, Info{}, g.explain(key, err)
	}
	return gcsReader{r, g, key}, g.info(a), nil
}

type gcsReader struct {
	r   *storage.Reader
	g   *GCS
	key string
}

func (r gcsReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.g.explain(r.key, err)
	}
	return n, err
}

func (r gcsReader) Close() error { return r.r.Close() }

func (g *GCS) ReadRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	o, err := g.object(key)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	r, err := o.NewRangeReader(ctx, off, n)
	if err != nil {
		var ge *googleapi.Error
		if errors.As(err, &ge) && ge.Code == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(strings.NewReader("")), nil // off at or past the end
		}
		return nil, g.explain(key, err)
	}
	return r, nil
}

// Put uploads what r yields in a resumable upload that is finalized only
// after the last byte: a reader that fails, or ctx ended, cancels the
// upload and nothing appears under key (an object there stays as it was).
// The client holds one chunk (16 MiB) in memory.
func (g *GCS) Put(ctx context.Context, key string, r io.Reader) error {
	o, err := g.object(key)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := o.NewWriter(wctx)
	if _, err := io.CopyBuffer(w, ctxReader{ctx, r}, make([]byte, 256<<10)); err != nil {
		cancel() // the upload is abandoned, never finalized
		w.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		cancel()
		w.Close()
		return err
	}
	return g.explain(key, w.Close())
}

// PutFile uploads the local file at path.
func (g *GCS) PutFile(ctx context.Context, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return g.Put(ctx, key, f)
}
