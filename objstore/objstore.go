// Package objstore is what a job keeps outside its database: the input it
// reads, the chunk and results files its steps leave for later steps, and
// the output it writes. A Store is either a local directory (Dir: the
// state directory, as sluice has always kept them) or a bucket of an
// S3-compatible object store (S3: AWS S3, MinIO, Cloudflare R2, GCS's S3
// interface, Ceph, versitygw). docs/scale-out.md, "Object storage", is the
// user's side.
//
// Every Store keeps the same promises, which the tests check on both
// (TestStoreContract):
//
//   - Put and PutFile are all or nothing: an object appears under its key
//     only complete and durable; a failed or interrupted put leaves nothing
//     under the key (and an object that was there stays as it was).
//   - Open reads an object from its start without holding it in memory;
//     ReadRange reads part of one.
//   - Stat and Open of a missing key fail with an error that wraps
//     ErrNotExist; Delete of a missing key succeeds.
//   - List calls fn for every object whose key starts with a prefix, in
//     key order.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-batch/sluice/internal/atomicfile"

	"github.com/sluice-batch/sluice/internal/iobuf"
)

// ErrNotExist is wrapped by the error of Stat, Open and ReadRange of a key
// with no object.
var ErrNotExist = errors.New("no such object")

// Info describes an object.
type Info struct {
	Key     string // relative to the store's root or prefix
	Size    int64
	ModTime time.Time
	// ETag changes whenever the object's content does (S3's ETag; for a
	// file, its size and modification time).
	ETag string
}

// Store is a flat namespace of objects under "/"-separated keys.
type Store interface {
	// Put stores what r yields under key, complete or not at all.
	Put(ctx context.Context, key string, r io.Reader) error
	// PutFile stores the local file at path under key.
	PutFile(ctx context.Context, key, path string) error
	// Open reads the object under key from its start.
	Open(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// ReadRange reads n bytes of the object under key from offset off
	// (fewer at its end).
	ReadRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Stat describes the object under key.
	Stat(ctx context.Context, key string) (Info, error)
	// List calls fn for each object whose key starts with prefix, in key
	// order, until fn returns an error (returned).
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// Delete removes the object under key; a missing one is no error.
	Delete(ctx context.Context, key string) error
	// String names the store for messages (never with credentials).
	String() string
}

// Location is a parsed store or object address: "s3://bucket/key",
// "gs://bucket/key" (Cloud Storage) or a local path.
type Location struct {
	S3     bool
	GCS    bool   // gs://
	Bucket string // S3 and GCS only
	Key    string // S3 and GCS: the key or prefix, without a leading "/"
	Path   string // local: the absolute path
}

// IsURL reports whether s names an object in an object store rather than a
// local file.
func IsURL(s string) bool { return strings.HasPrefix(s, "s3://") || strings.HasPrefix(s, "gs://") }

// Parse reads "s3://bucket/key", "gs://bucket/key" or a local path (made
// absolute).
func Parse(s string) (Location, error) {
	if !strings.Contains(s, "://") {
		p, err := filepath.Abs(s)
		if err != nil {
			return Location{}, err
		}
		return Location{Path: p}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return Location{}, fmt.Errorf("%s: %w", s, err)
	}
	if u.Scheme != "s3" && u.Scheme != "gs" {
		return Location{}, fmt.Errorf("%s: only s3:// and gs:// URLs name objects (or give a local path)", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		creds := "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
		if u.Scheme == "gs" {
			creds = "GOOGLE_OAUTH_ACCESS_TOKEN or Application Default Credentials"
		}
		return Location{}, fmt.Errorf("%s://%s...: want %s://BUCKET/KEY, without credentials, query or fragment (credentials come from %s)", u.Scheme, u.Host, u.Scheme, creds)
	}
	if u.Host == "" {
		return Location{}, fmt.Errorf("%s: no bucket; want %s://BUCKET/KEY", s, u.Scheme)
	}
	key := strings.TrimPrefix(u.Path, "/")
	for _, part := range strings.Split(strings.TrimSuffix(key, "/"), "/") {
		if key != "" && (part == "" || part == "." || part == "..") {
			return Location{}, fmt.Errorf("%s: the key has empty, . or .. parts", s)
		}
	}
	return Location{S3: u.Scheme == "s3", GCS: u.Scheme == "gs", Bucket: u.Host, Key: key}, nil
}

// String is the location as Parse reads it.
func (l Location) String() string {
	if l.S3 {
		return "s3://" + l.Bucket + "/" + l.Key
	}
	if l.GCS {
		return "gs://" + l.Bucket + "/" + l.Key
	}
	return l.Path
}

// Join is key with more parts, "/"-separated.
func Join(key string, parts ...string) string {
	all := make([]string, 0, 1+len(parts))
	if key = strings.Trim(key, "/"); key != "" {
		all = append(all, key)
	}
	for _, p := range parts {
		if p = strings.Trim(filepath.ToSlash(p), "/"); p != "" {
			all = append(all, p)
		}
	}
	return strings.Join(all, "/")
}

// Fetch copies the object under key to the local file at dst, which
// appears only complete and synced (a temp file beside it until then).
func Fetch(ctx context.Context, s Store, key, dst string) error {
	r, _, err := s.Open(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	return writeLocal(dst, r, fmt.Sprintf("fetch %s from %s", key, s))
}

// writeLocal writes what r yields to the local file dst (its directory
// made first), which appears only complete and synced (a temp file beside
// it until then); what names the copy in its error.
func writeLocal(dst string, r io.Reader, what string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := atomicfile.Create(dst)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := iobuf.Copy(f, r, 1<<20); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return f.Commit()
}

// checkKey refuses keys that could name something outside a store's root.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || path.Clean(key) != key || key == ".." || strings.HasPrefix(key, "../") {
		return fmt.Errorf("objstore: bad key %q", key)
	}
	return nil
}

// classify is a remote store's reading of its client's error: kind is
// ErrNotExist, ErrNoBucket or ErrCredentials when the error means one
// (detail then follows it, as "(HTTP 403): check ..."), else nil, and
// detail is the service's own answer ("CODE: message"), or "" when err is
// no answer of the service.
type classify func(err error) (detail string, kind error)

// explainRemote is what every remote store makes of a client error about
// key ("" for the store itself): where is the store for messages
// (scheme://bucket/prefix at endpoint), base is scheme://bucket/prefix.
// Cancellation passes unchanged; a connection that failed is
// ErrUnreachable.
func explainRemote(where, bucket, base, key string, err error, c classify) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	what := where
	if key != "" {
		what = base + key
	}
	switch detail, kind := c(err); {
	case kind == ErrNoBucket:
		return fmt.Errorf("%s: bucket %s: %w", where, bucket, ErrNoBucket)
	case kind == ErrCredentials:
		return fmt.Errorf("%s: %w %s", what, ErrCredentials, detail)
	case kind != nil:
		return fmt.Errorf("%s: %w", what, kind)
	case detail != "":
		return fmt.Errorf("%s: %s", what, detail)
	}
	var ne net.Error
	if errors.As(err, &ne) || strings.Contains(err.Error(), "dial tcp") {
		return fmt.Errorf("%s: %w: %v", where, ErrUnreachable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
