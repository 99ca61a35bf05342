// Package atomicfile writes files that appear under their final name only
// when complete: the bytes go to a temp file in the final name's directory,
// which is fsynced, closed and renamed over the final name. A crash at any
// point leaves the final name absent (or as it was) and at most a temp file
// named "." + base + ".*.tmp" beside it. See docs/crash-safety.md.
//
// A rename is durable once its directory is synced: SyncDir does that, for
// the callers whose next step (a tracker commit, a user reading the output)
// must not survive a power loss that the rename does not.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// File is a temp file that becomes final on Commit. Its *os.File is the
// temp file: write, seek and truncate it as any file.
type File struct {
	*os.File
	final  string
	closed bool // synced and closed (Finish)
	done   bool // committed or aborted
}

// Create opens a new temp file, private to the user, in final's directory.
func Create(final string) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(final), TempPattern(final))
	if err != nil {
		return nil, err
	}
	return &File{File: f, final: final}, nil
}

// CreateMode opens a new temp file in final's directory, named as Create
// names them, with mode perm less the process's umask: the kernel applies
// the umask as it creates the file (open(2) with O_EXCL under a fresh
// name), so a user's output made with 0o666 gets the mode every Unix tool
// would give it (0o644 under umask 022), with no racy read of the umask.
func CreateMode(final string, perm os.FileMode) (*File, error) {
	dir, prefix := filepath.Dir(final), "."+filepath.Base(final)+"."
	for try := 0; ; try++ {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10)+".tmp")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) && try < 10000 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &File{File: f, final: final}, nil
	}
}

// TempPattern is the os.CreateTemp pattern of final's temp files, for
// callers that sweep the temps a killed process left.
func TempPattern(final string) string { return "." + filepath.Base(final) + ".*.tmp" }

// Final is the name the file gets on Commit.
func (f *File) Final() string { return f.final }

// Finish fsyncs and closes the temp file, so that a later Commit is only
// the rename (the merger finishes both of its files before renaming
// either). Calling it again does nothing.
func (f *File) Finish() error {
	if f.closed {
		return nil
	}
	f.closed = true
	err := f.File.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// Commit finishes the temp file and renames it over the final name. On
// failure the temp file is removed.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: " + f.final + " already committed or aborted")
	}
	err := f.Finish()
	if err == nil {
		err = os.Rename(f.File.Name(), f.final)
	}
	f.done = true
	if err != nil {
		os.Remove(f.File.Name())
	}
	return err
}

// Abort closes and removes the temp file. It does nothing after Commit, so
// it can be deferred.
func (f *File) Abort() {
	if f == nil || f.done {
		return
	}
	f.done = true
	if !f.closed {
		f.closed = true
		f.File.Close()
	}
	os.Remove(f.File.Name())
}

// Commit fsyncs, closes and renames an open temp file that the caller
// named itself (the splitter's chunk files are reopened under their temp
// name as they grow) to final. On failure the temp file is removed.
func Commit(tmp *os.File, final string) error {
	err := tmp.Sync()
	if err != nil {
		err = fmt.Errorf("sync: %w", err)
	}
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), final)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// WriteFile writes data to final through a synced temp file.
func WriteFile(final string, data []byte) error {
	f, err := Create(final)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}

// SyncDir fsyncs a directory, making the renames into it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
