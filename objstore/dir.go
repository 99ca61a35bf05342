package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-batch/sluice/internal/atomicfile"
)

// Dir is a Store in a local directory: each key is a file under Root, its
// "/" parts directories. Puts go through a synced temp file renamed into
// place (internal/atomicfile), so a key is complete or absent.
type Dir struct {
	Root string
}

// NewDir is the store in the directory root (created when missing).
func NewDir(root string) (*Dir, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, err
	}
	return &Dir{Root: abs}, nil
}

func (d *Dir) String() string { return d.Root }

// Path is the file of key.
func (d *Dir) Path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.Root, filepath.FromSlash(key)), nil
}

func (d *Dir) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := d.Path(key)
	if err != nil {
		return err
	}
	if err := writeLocal(p, ctxReader{ctx, r}, "put "+key); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

func (d *Dir) PutFile(ctx context.Context, key, path string) error {
	p, err := d.Path(key)
	if err != nil {
		return err
	}
	if same, err := sameFile(p, path); err != nil || same {
		return err // the file is the object already
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return d.Put(ctx, key, f)
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, nil
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

func (d *Dir) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	p, err := d.Path(key)
	if err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, Info{}, notExist(key, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Info{}, err
	}
	if st.IsDir() {
		f.Close()
		return nil, Info{}, fmt.Errorf("%s: %w (a directory)", key, ErrNotExist)
	}
	return f, fileInfo(key, st), nil
}

func (d *Dir) ReadRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	f, _, err := d.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f.(*os.File), off, n), f}, nil
}

func (d *Dir) Stat(ctx context.Context, key string) (Info, error) {
	p, err := d.Path(key)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return Info{}, notExist(key, err)
	}
	if st.IsDir() {
		return Info{}, fmt.Errorf("%s: %w (a directory)", key, ErrNotExist)
	}
	return fileInfo(key, st), nil
}

func (d *Dir) List(ctx context.Context, prefix string, fn func(Info) error) error {
	// Walk the deepest directory the prefix names whole.
	start := d.Root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		p, err := d.Path(prefix[:i])
		if err != nil {
			return err
		}
		start = p
	}
	var infos []Info
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || isTemp(e.Name()) {
			return nil
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		st, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		infos = append(infos, fileInfo(key, st))
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	for _, in := range infos {
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.Path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// isTemp tells the temp files of puts in progress (atomicfile's names).
func isTemp(name string) bool { return strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") }

func fileInfo(key string, st os.FileInfo) Info {
	return Info{Key: key, Size: st.Size(), ModTime: st.ModTime(),
		ETag: strconv.FormatInt(st.Size(), 10) + "-" + strconv.FormatInt(st.ModTime().UnixNano(), 10)}
}

func notExist(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	return err
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
