package merger

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-batch/sluice/internal/atomicfile"
)

// atomicFile is an output written to a temp file beside its final name,
// compressed by the final name's suffix (.gz, .zst), fsynced, then renamed.
// Lines are gathered in 1 MiB buffers that a goroutine writes (and
// compresses), so writing overlaps merging.
type atomicFile struct {
	final string
	f     *atomicfile.File
	fw    *fileWriter
	fbw   *bufio.Writer // between a gzip writer and the file
	zw    io.WriteCloser
	aw    *asyncWriter
	lines int64
}

const writeBuffer = 1 << 20

// tempPrefix is the prefix of temp files for final (in final's directory);
// a random number and ".tmp" follow it.
func tempPrefix(final string) string { return "." + filepath.Base(final) + "." }

func createAtomic(final string) (*atomicFile, error) {
	// A user's file: 0o666 less the umask, as any Unix tool makes it.
	f, err := atomicfile.CreateMode(final, 0o666) // named tempPrefix(final)*.tmp
	if err != nil {
		return nil, fmt.Errorf("merger: %w", err)
	}
	a := &atomicFile{final: final, f: f, fw: &fileWriter{f: f.File}}
	var dst io.Writer = a.fw
	switch compression(final) {
	case "gz":
		a.fbw = bufio.NewWriterSize(a.fw, 256<<10)
		a.zw, err = gzip.NewWriterLevel(a.fbw, gzip.DefaultCompression)
		dst = a.zw
	case "zst":
		// Concurrency > 1 encodes blocks beside the writing goroutine;
		// WithConcurrentBlocks measured no faster here at 2.5x the memory.
		a.zw, err = zstd.NewWriter(a.fw, zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithWindowSize(2<<20))
		dst = a.zw
	}
	if err != nil {
		a.abort()
		return nil, fmt.Errorf("merger: %w", err)
	}
	a.aw = newAsyncWriter(dst, writeBuffer, 3)
	return a, nil
}

func compression(name string) string {
	switch {
	case strings.HasSuffix(name, ".gz"):
		return "gz"
	case strings.HasSuffix(name, ".zst"):
		return "zst"
	}
	return ""
}

// writeLine writes line and a newline.
func (a *atomicFile) writeLine(line []byte) error {
	a.lines++
	return a.aw.writeLine(line)
}

// finish flushes, closes the compressor, fsyncs and closes the temp file,
// and returns the size of the file.
func (a *atomicFile) finish() (int64, error) {
	err := a.aw.close()
	if a.zw != nil {
		if e := a.zw.Close(); err == nil {
			err = e
		}
		a.zw = nil
	}
	if a.fbw != nil && err == nil {
		err = a.fbw.Flush()
	}
	if e := a.f.Finish(); err == nil { // fsync and close
		err = e
	}
	if err != nil {
		return 0, fmt.Errorf("merger: write %s: %w", a.final, err)
	}
	return a.fw.off, nil
}

// commit renames the finished temp file over the final name.
func (a *atomicFile) commit() error {
	if err := a.f.Commit(); err != nil {
		return fmt.Errorf("merger: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(a.final)); err != nil {
		return fmt.Errorf("merger: %w", err)
	}
	return nil
}

// abort drops the temp file. Safe after finish and on a nil receiver.
func (a *atomicFile) abort() {
	if a == nil || a.f == nil {
		return
	}
	if a.aw != nil {
		a.aw.buf = a.aw.buf[:0] // drop what was not written yet
		a.aw.close()
	}
	if a.zw != nil {
		a.zw.Close()
		a.zw = nil
	}
	a.f.Abort()
	a.f = nil
}

// removeStaleTemps removes the temp files a killed merge to final left
// behind (names made by createAtomic: ".<base>.<digits>.tmp").
func removeStaleTemps(final string) {
	dir, prefix := filepath.Dir(final), tempPrefix(final)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".tmp") {
			continue
		}
		mid := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".tmp")
		if mid != "" && strings.Trim(mid, "0123456789") == "" {
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// runDirPrefix names the directories of intermediate runs of a merge to
// output, so that a later merge to the same output removes those a killed
// one left, and no other's.
func runDirPrefix(output string) string {
	abs, err := filepath.Abs(output)
	if err != nil {
		abs = output
	}
	sum := sha256.Sum256([]byte(abs))
	return ".sluice-merge-" + hex.EncodeToString(sum[:6]) + "-"
}

func removeStaleRunDirs(tempDir, output string) {
	prefix := runDirPrefix(output)
	ents, err := os.ReadDir(tempDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			os.RemoveAll(filepath.Join(tempDir, e.Name()))
		}
	}
}

// errorsName inserts "errors" into output's name: out.jsonl ->
// out.errors.jsonl, out.jsonl.zst -> out.errors.jsonl.zst, out ->
// out.errors. The compression suffix is kept, so the errors file is
// compressed like the output.
func errorsName(output string) string {
	dir, base := filepath.Split(output)
	suffix := ""
	for _, s := range []string{".gz", ".zst"} {
		if strings.HasSuffix(base, s) && len(base) > len(s) {
			base, suffix = strings.TrimSuffix(base, s), s
			break
		}
	}
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		return dir + base[:i] + ".errors" + base[i:] + suffix
	}
	return dir + base + ".errors" + suffix
}

// asyncWriter gathers lines in buffers that a goroutine writes to w.
type asyncWriter struct {
	w      io.Writer
	buf    []byte
	full   chan []byte
	free   chan []byte
	done   chan struct{}
	err    error // the goroutine's; read after done
	failed atomic.Bool
	closed bool
	nbuf   int // buffers made besides the first
	size   int
}

func newAsyncWriter(w io.Writer, size, n int) *asyncWriter {
	a := &asyncWriter{w: w, size: size, buf: make([]byte, 0, size), full: make(chan []byte, n),
		free: make(chan []byte, n+1), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for b := range a.full {
			if a.err == nil {
				if _, a.err = a.w.Write(b); a.err != nil {
					a.failed.Store(true)
				}
			}
			a.free <- b[:0]
		}
	}()
	return a
}

func (a *asyncWriter) writeLine(p []byte) error {
	if len(a.buf)+len(p)+1 > cap(a.buf) && len(a.buf) > 0 {
		if err := a.send(); err != nil {
			return err
		}
	}
	a.buf = append(a.buf, p...)
	a.buf = append(a.buf, '\n')
	return nil
}

func (a *asyncWriter) send() error {
	if a.failed.Load() {
		a.close()
		return a.err
	}
	a.full <- a.buf
	select {
	case a.buf = <-a.free:
	default:
		if a.nbuf < cap(a.full) { // make buffers only as needed
			a.nbuf++
			a.buf = make([]byte, 0, a.size)
		} else {
			a.buf = <-a.free
		}
	}
	return nil
}

// close writes what is left and stops the goroutine; safe to repeat.
func (a *asyncWriter) close() error {
	if a.closed {
		return a.err
	}
	if len(a.buf) > 0 && !a.failed.Load() {
		a.full <- a.buf
	}
	a.closed = true
	close(a.full)
	<-a.done
	a.buf = nil
	return a.err
}
