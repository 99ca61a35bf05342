package main

// Object storage (docs/scale-out.md, "Object storage"): an input read from
// s3://, an output written to s3://, and --store, where a job's chunk and
// results files live beside the local state directory, which is then a
// cache. Everything here is at the edges: the splitter reads a stream,
// the dispatcher puts and fetches through dispatcher.Files, the merger
// writes local files that are uploaded once complete.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/splitter"
)

// pathArg is a command line file argument as sluice keeps it: an s3://
// URL as given (checked), a local path made absolute.
func pathArg(s string) (string, error) {
	if !strings.Contains(s, "://") {
		return filepath.Abs(s)
	}
	loc, err := objstore.Parse(s)
	if err != nil {
		return "", withCode(exitUsage, err)
	}
	if loc.Key == "" || strings.HasSuffix(loc.Key, "/") {
		return "", usageErr("%s: name an object (s3://BUCKET/KEY), not a bucket or a prefix", s)
	}
	return loc.String(), nil
}

var s3Stores sync.Map // bucket+"/"+prefix -> *objstore.S3

// s3Store is the S3 store of bucket (under prefix) as the environment
// configures it, checked once per process: a missing bucket, refused
// credentials or an endpoint that cannot be reached are told before any
// work, with the exit code README's table gives them.
func s3Store(ctx context.Context, bucket, prefix string) (*objstore.S3, error) {
	id := bucket + "/" + prefix
	if s, ok := s3Stores.Load(id); ok {
		return s.(*objstore.S3), nil
	}
	s, err := objstore.NewS3(ctx, bucket, prefix, objstore.S3Options{Endpoint: objstore.EndpointFromEnv(os.Getenv)})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	if err := s.Check(ctx); err != nil {
		return nil, storeErr(err)
	}
	s3Stores.Store(id, s)
	return s, nil
}

// storeErr gives a store's error its exit code: a bucket that does not
// exist is bad usage (2); refused credentials and an endpoint out of
// reach stop the run (1), as a bad provider key or the network down do.
func storeErr(err error) error {
	if errors.Is(err, objstore.ErrNoBucket) {
		return withCode(exitUsage, err)
	}
	return err
}

// objectOf is the store and key of an s3:// URL.
func objectOf(ctx context.Context, url string) (*objstore.S3, string, error) {
	loc, err := objstore.Parse(url)
	if err != nil {
		return nil, "", withCode(exitUsage, err)
	}
	s, err := s3Store(ctx, loc.Bucket, "")
	return s, loc.Key, err
}

// inputInfo is the size and modification time of the input, a file or
// an object (S3's LastModified changes whenever the object is written).
type inputInfo struct {
	size  int64
	mtime time.Time
}

// statInput describes the input; a missing one is bad usage.
func statInput(ctx context.Context, input string) (inputInfo, error) {
	if !objstore.IsURL(input) {
		st, err := os.Stat(input)
		if err != nil {
			return inputInfo{}, withCode(exitUsage, fmt.Errorf("input: %w", err))
		}
		if st.IsDir() {
			return inputInfo{}, usageErr("input %s is a directory", input)
		}
		return inputInfo{size: st.Size(), mtime: st.ModTime()}, nil
	}
	s, key, err := objectOf(ctx, input)
	if err != nil {
		return inputInfo{}, err
	}
	in, err := s.Stat(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return inputInfo{}, usageErr("input %s: no such object", input)
	}
	if err != nil {
		return inputInfo{}, storeErr(fmt.Errorf("input: %w", err))
	}
	return inputInfo{size: in.Size, mtime: in.ModTime}, nil
}

// inputOpener is splitter.Config.Open for an input in object storage (nil
// for a local file): a stream of ranged reads, never a download first.
func inputOpener(ctx context.Context, input string) func() (io.ReadCloser, sluice.Fingerprint, error) {
	if !objstore.IsURL(input) {
		return nil
	}
	return func() (io.ReadCloser, sluice.Fingerprint, error) {
		s, key, err := objectOf(ctx, input)
		if err != nil {
			return nil, sluice.Fingerprint{}, err
		}
		r, info, err := s.Open(ctx, key)
		if err != nil {
			return nil, sluice.Fingerprint{}, err
		}
		return r, sluice.Fingerprint{Size: info.Size, ModTime: info.ModTime}, nil
	}
}

// hashInput is the input's fingerprint hash, read whole (as a stream).
func hashInput(ctx context.Context, input string) (string, error) {
	if !objstore.IsURL(input) {
		fp, err := splitter.FingerprintFile(input)
		return fp.Hash, err
	}
	s, key, err := objectOf(ctx, input)
	if err != nil {
		return "", err
	}
	r, _, err := s.Open(ctx, key)
	if err != nil {
		return "", err
	}
	defer r.Close()
	return splitter.HashReader(r)
}

// checkObjectOutput checks an output (or errors file) in object storage:
// never the input's object, and a bucket that is there and takes our
// credentials.
func checkObjectOutput(ctx context.Context, flag, out, input string) error {
	if out == input {
		return usageErr("%s %s is the input object: sluice never writes over its input; choose another output", flag, out)
	}
	_, _, err := objectOf(ctx, out)
	return err
}

// errorsPathForURL is errorsPathFor for an s3:// output.
func errorsPathForURL(out string) string {
	dir, base := path.Split(out)
	return dir + filepath.Base(errorsPathFor(filepath.Join(string(filepath.Separator), base)))
}

// storeFlag is --store, else $SLUICE_STORE.
func (f *jobFlags) storeFlag() string {
	if f.store != "" {
		return f.store
	}
	return os.Getenv("SLUICE_STORE")
}

// jobStore opens --store: nil when it is the state directory (the default),
// whose job directories are the files themselves.
func jobStore(ctx context.Context, f *jobFlags, stateDir string) (objstore.Store, error) {
	s := f.storeFlag()
	if s == "" {
		return nil, nil
	}
	loc, err := objstore.Parse(s)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("--store: %w", err))
	}
	if loc.S3 {
		return s3Store(ctx, loc.Bucket, loc.Key)
	}
	if filepath.Clean(loc.Path) == filepath.Clean(stateDir) {
		return nil, nil
	}
	d, err := objstore.NewDir(loc.Path)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("--store: %w", err))
	}
	return d, nil
}

// jobFiles keeps a job's files in a store under jobs/JOB/, the layout of
// the state directory; the job directory is the local cache of them
// (dispatcher.Files).
type jobFiles struct {
	store objstore.Store
	key   string // jobs/JOB
	dir   string // the job directory
}

func newJobFiles(store objstore.Store, job *sluice.Job) *jobFiles {
	if store == nil {
		return nil
	}
	return &jobFiles{store: store, key: objstore.Join("jobs", job.ID), dir: job.Dir}
}

func (j *jobFiles) Put(ctx context.Context, rel string) error {
	return j.store.PutFile(ctx, objstore.Join(j.key, rel), filepath.Join(j.dir, rel))
}

func (j *jobFiles) Fetch(ctx context.Context, rel string) error {
	local := filepath.Join(j.dir, rel)
	if _, err := os.Stat(local); err == nil {
		return nil
	}
	if err := objstore.Fetch(ctx, j.store, objstore.Join(j.key, rel), local); err != nil {
		if errors.Is(err, objstore.ErrNotExist) {
			return fmt.Errorf("%s is neither in the job directory %s nor in the store %s: %w", rel, j.dir, j.store, err)
		}
		return err
	}
	return nil
}

// putAll stores every file of the job directory (after planning: the
// chunk files, rejected lines, reused answers), 4 at a time.
func (j *jobFiles) putAll(ctx context.Context) error {
	if j == nil {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	err := filepath.WalkDir(j.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			return err
		}
		rel, err := filepath.Rel(j.dir, p)
		if err != nil {
			return err
		}
		g.Go(func() error { return j.Put(gctx, rel) })
		return gctx.Err()
	})
	if werr := g.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("store the plan's files in %s: %w", j.store, err)
	}
	return nil
}

// fetchForMerge fetches what the job directory lacks of the files a
// merge reads: the results files and the rejected lines' records.
func (j *jobFiles) fetchForMerge(ctx context.Context) error {
	if j == nil {
		return nil
	}
	if err := j.Fetch(ctx, splitter.RejectedResults); err != nil && !errors.Is(err, objstore.ErrNotExist) {
		return err
	}
	return j.fetchDir(ctx, "results")
}

// fetchDir fetches what the job directory lacks of the store's files
// under sub.
func (j *jobFiles) fetchDir(ctx context.Context, sub string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	prefix := j.key + "/"
	err := j.store.List(ctx, objstore.Join(j.key, sub), func(in objstore.Info) error {
		rel := strings.TrimPrefix(in.Key, prefix)
		g.Go(func() error { return j.Fetch(gctx, filepath.FromSlash(rel)) })
		return gctx.Err()
	})
	if werr := g.Wait(); err == nil {
		err = werr
	}
	return err
}

// localCopy is where the merge writes an output (or errors file) of job:
// its path, or for an object a file in the job directory.
func localCopy(job *sluice.Job, prefix, out string) string {
	if !objstore.IsURL(out) {
		return out
	}
	dir := filepath.Join(job.Dir, "output")
	os.MkdirAll(dir, 0o700)
	return filepath.Join(dir, prefix+path.Base(out))
}

// uploadOutputs stores the merged local files of outputs in object
// storage, each complete or not at all (a multipart upload completed only
// at the end), and removes the local copies.
func uploadOutputs(ctx context.Context, pairs ...[2]string) error {
	for _, p := range pairs {
		local, url := p[0], p[1]
		if local == url {
			continue // a local output
		}
		s, key, err := objectOf(ctx, url)
		if err != nil {
			return err
		}
		if err := s.PutFile(ctx, key, local); err != nil {
			return fmt.Errorf("upload %s: %w", url, storeErr(err))
		}
		os.Remove(local)
	}
	return nil
}
