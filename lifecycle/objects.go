package lifecycle

// Object storage (docs/scale-out.md, "Object storage"): an input read from
// an object URL, an output written to one, and a store of the job's chunk
// and results files beside the local state directory, which is then a
// cache. The command builds the stores (from the environment, which this
// package never reads) and hands them in: Spec.Objects and Spec.Files,
// RunOptions.Files, MergeOptions.Objects and MergeOptions.Files.

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
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/splitter"
)

// Objects finds the store and key of an object URL (s3://BUCKET/KEY).
type Objects func(ctx context.Context, url string) (objstore.Store, string, error)

func (o Objects) get(ctx context.Context, url string) (objstore.Store, string, error) {
	if o == nil {
		return nil, "", fmt.Errorf("%s: no object store configured", url)
	}
	return o(ctx, url)
}

// inputInfo is the size and modification time of the input, a file or an
// object (S3 changes an object's LastModified whenever it is written).
type inputInfo struct {
	size  int64
	mtime time.Time
}

// statInput describes the input; a missing or unreadable one is bad
// input.
func statInput(ctx context.Context, objects Objects, input string) (inputInfo, error) {
	if !objstore.IsURL(input) {
		st, err := os.Stat(input)
		if err != nil {
			return inputInfo{}, BadInput(fmt.Errorf("input: %w", err))
		}
		if st.IsDir() {
			return inputInfo{}, badInputf("input %s is a directory", input)
		}
		// An input that cannot be read (its mode, say) is the user's to
		// fix, named now rather than when the plan opens it.
		f, err := os.Open(input)
		if err != nil {
			return inputInfo{}, BadInput(fmt.Errorf("input: %w", err))
		}
		f.Close()
		return inputInfo{size: st.Size(), mtime: st.ModTime()}, nil
	}
	s, key, err := objects.get(ctx, input)
	if err != nil {
		return inputInfo{}, err
	}
	in, err := s.Stat(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return inputInfo{}, badInputf("input %s: no such object", input)
	}
	if err != nil {
		return inputInfo{}, fmt.Errorf("input: %w", err)
	}
	return inputInfo{size: in.Size, mtime: in.ModTime}, nil
}

// inputOpener is splitter.Config.Open for an input in object storage (nil
// for a local file): a stream of ranged reads, never a download first.
func inputOpener(ctx context.Context, objects Objects, input string) func() (io.ReadCloser, sluice.Fingerprint, error) {
	if !objstore.IsURL(input) {
		return nil
	}
	return func() (io.ReadCloser, sluice.Fingerprint, error) {
		s, key, err := objects.get(ctx, input)
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
func hashInput(ctx context.Context, objects Objects, input string) (string, error) {
	if !objstore.IsURL(input) {
		fp, err := splitter.FingerprintFile(input)
		return fp.Hash, err
	}
	s, key, err := objects.get(ctx, input)
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

// jobFiles keeps a job's files in a store under jobs/JOB/PLAN/, the layout of
// the state directory; the job directory is the local cache of them
// (dispatcher.Files).
type jobFiles struct {
	store objstore.Store
	key   string // Job.FilesKey: jobs/JOB/PLAN (jobs/JOB for older jobs)
	dir   string // the job directory
}

// CacheIn makes the job directory of job, whose files are kept in store,
// the one in the state directory of db: it may be another machine's, or
// empty, and is filled from the store as steps need the files. Nothing
// changes without a store.
func CacheIn(db Store, job *sluice.Job, store objstore.Store) error {
	if store == nil {
		return nil
	}
	job.Dir = filepath.Join(db.Dir(), "jobs", job.ID)
	return os.MkdirAll(job.Dir, 0o700)
}

// checkStoreHolds refuses, before any work, a store that does not hold the
// files of a job planned before (another --store than its plan's), unless
// this state directory still has them itself.
func checkStoreHolds(ctx context.Context, db Store, job *sluice.Job, store objstore.Store) error {
	if store == nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(db.Dir(), "jobs", job.ID, "chunks")); err == nil {
		return nil
	}
	errFound := errors.New("found")
	err := store.List(ctx, objstore.Join(job.FilesKey(), "chunks")+"/", func(objstore.Info) error { return errFound })
	switch {
	case err == errFound:
		return nil
	case err != nil:
		return err
	}
	return badInputf("job %s has no files in the store %s nor in this state directory: was it planned with another --store? "+
		"give the store it was planned with, or run with --job NEW_NAME to plan a new job", job.ID, store)
}

// filesOf is dispatcher.Options.Files for a job whose files are kept in
// store (nil without one).
func filesOf(store objstore.Store, job *sluice.Job) dispatcher.Files {
	if store == nil {
		return nil
	}
	return newJobFiles(store, job)
}

// newJobFiles is nil (nothing to keep elsewhere) without a store.
func newJobFiles(store objstore.Store, job *sluice.Job) *jobFiles {
	if store == nil {
		return nil
	}
	return &jobFiles{store: store, key: job.FilesKey(), dir: job.Dir}
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
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	prefix := j.key + "/"
	err := j.store.List(ctx, objstore.Join(j.key, "results")+"/", func(in objstore.Info) error {
		rel := strings.TrimPrefix(in.Key, prefix)
		g.Go(func() error { return j.Fetch(gctx, filepath.FromSlash(rel)) })
		return gctx.Err()
	})
	if werr := g.Wait(); err == nil {
		err = werr
	}
	return err
}

// statOutput is the size and modification time of an output: a file, or
// an object.
func statOutput(ctx context.Context, objects Objects, out string) (int64, time.Time, error) {
	if !objstore.IsURL(out) {
		st, err := os.Stat(out)
		if err != nil {
			return 0, time.Time{}, err
		}
		return st.Size(), st.ModTime(), nil
	}
	s, key, err := objects.get(ctx, out)
	if err != nil {
		return 0, time.Time{}, err
	}
	in, err := s.Stat(ctx, key)
	return in.Size, in.ModTime, err
}

// localCopy is where the merge writes an output (or errors file) of job:
// its path, or for an object a file in the job directory.
func localCopy(job *sluice.Job, prefix, out string) (string, error) {
	if !objstore.IsURL(out) {
		return out, nil
	}
	dir := filepath.Join(job.Dir, "output")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return filepath.Join(dir, prefix+path.Base(out)), nil
}

// uploadOutputs stores the merged local files of outputs in object
// storage, each complete or not at all (a multipart upload completed only
// at the end), and removes the local copies.
func uploadOutputs(ctx context.Context, objects Objects, pairs ...[2]string) error {
	for _, p := range pairs {
		local, url := p[0], p[1]
		if local == url {
			continue // a local output
		}
		s, key, err := objects.get(ctx, url)
		if err != nil {
			return err
		}
		if a, ok := s.(interface {
			AbortIncomplete(context.Context, string) error
		}); ok {
			// An upload of this output that a killed merge left behind.
			if err := a.AbortIncomplete(ctx, key); err != nil {
				return fmt.Errorf("upload %s: %w", url, err)
			}
		}
		if err := s.PutFile(ctx, key, local); err != nil {
			return fmt.Errorf("upload %s: %w", url, err)
		}
		os.Remove(local)
	}
	return nil
}
