package splitter

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/iobuf"
)

// MaxLineBytes is the longest input line the splitter reads. A longer line
// is rejected without being held in memory (its custom_id stays unknown).
const MaxLineBytes = 64 << 20

// maxLineBytes is MaxLineBytes, lowered by tests.
var maxLineBytes = MaxLineBytes

// zstdMaxWindow bounds the zstd decoder's window: frames made with
// zstd --long=28 or more are refused rather than blowing the memory budget.
const zstdMaxWindow = 128 << 20

const (
	blockSize = 1 << 20 // bytes of input lines per block handed to a worker
	rawPrefix = 1024    // bytes of an over-long line kept for the rejects file
)

// hashReader hashes and counts the raw bytes of the input as they are read.
type hashReader struct {
	r io.Reader
	h *xxh3.Hasher128
	n *atomic.Int64
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.h.Write(p[:n])
		h.n.Add(int64(n))
	}
	return n, err
}

// input is an open input file: r yields its decompressed bytes.
type input struct {
	path   string
	f      io.Closer
	fp     sluice.Fingerprint
	format string // "plain", "gzip" or "zstd"
	hash   *xxh3.Hasher128
	raw    atomic.Int64 // file bytes read
	r      io.Reader
	hr     *hashReader
	close  func()
}

var (
	magicGzip = []byte{0x1f, 0x8b}
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

func openInput(path string, open func() (io.ReadCloser, sluice.Fingerprint, error)) (*input, error) {
	if open == nil {
		open = func() (io.ReadCloser, sluice.Fingerprint, error) { return openFile(path) }
	}
	f, fp, err := open()
	if err != nil {
		return nil, err
	}
	in := &input{path: path, f: f, hash: xxh3.New128(), format: "plain", close: func() {}}
	in.fp = fp
	hr := &hashReader{r: f, h: in.hash, n: &in.raw}
	in.hr = hr
	var magic [4]byte
	n, err := io.ReadFull(hr, magic[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		f.Close()
		return nil, err
	}
	src := io.MultiReader(bytes.NewReader(magic[:n]), hr)
	switch {
	case bytes.HasPrefix(magic[:n], magicGzip):
		zr, err := gzip.NewReader(src)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		in.format, in.r, in.close = "gzip", zr, func() { zr.Close() }
	case bytes.HasPrefix(magic[:n], magicZstd):
		zr, err := zstd.NewReader(src, zstd.WithDecoderLowmem(true), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(zstdMaxWindow), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: zstd: %w", path, err)
		}
		in.format, in.r, in.close = "zstd", zr, zr.Close
	default:
		in.r = src
	}
	return in, nil
}

// openFile opens a local input file; the fingerprint has its size and
// modification time.
func openFile(path string) (io.ReadCloser, sluice.Fingerprint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, sluice.Fingerprint{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, sluice.Fingerprint{}, err
	}
	if st.IsDir() {
		f.Close()
		return nil, sluice.Fingerprint{}, fmt.Errorf("%s is a directory", path)
	}
	return f, sluice.Fingerprint{Size: st.Size(), ModTime: st.ModTime()}, nil
}

func (in *input) Close() {
	in.close()
	in.f.Close()
}

// finish fills the fingerprint's hash once the whole file was read.
func (in *input) finish() (sluice.Fingerprint, error) {
	// Bytes after the end of a compressed stream count too.
	if _, err := io.Copy(io.Discard, in.hr); err != nil {
		return sluice.Fingerprint{}, err
	}
	fp := in.fp
	sum := in.hash.Sum128().Bytes()
	fp.Hash = "xxh3-128:" + hex.EncodeToString(sum[:])
	return fp, nil
}

// FingerprintFile returns the fingerprint Split gives a file: its size,
// modification time and the xxh3-128 of its bytes (as stored, compressed or
// not).
func FingerprintFile(path string) (sluice.Fingerprint, error) {
	f, err := os.Open(path)
	if err != nil {
		return sluice.Fingerprint{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return sluice.Fingerprint{}, err
	}
	hash, err := HashReader(f)
	if err != nil {
		return sluice.Fingerprint{}, err
	}
	return sluice.Fingerprint{Size: st.Size(), ModTime: st.ModTime(), Hash: hash}, nil
}

// HashReader is the fingerprint hash of the bytes r yields (as stored,
// compressed or not): what Split records for an input it read from r.
func HashReader(r io.Reader) (string, error) {
	h := xxh3.New128()
	if _, err := iobuf.Copy(h, r, 1<<20); err != nil {
		return "", err
	}
	sum := h.Sum128().Bytes()
	return "xxh3-128:" + hex.EncodeToString(sum[:]), nil
}

// block is a run of whole input lines, as the reader cuts them.
type block struct {
	buf   []byte // backing buffer
	data  []byte // whole lines (the last one may lack its newline at EOF)
	first int64  // line number of its first line
	lines int64  // lines in data
	long  bool   // data is the prefix of one line over MaxLineBytes
	err   error  // set on the marker block that ends a failed read
	done  chan struct{}

	// Filled by a worker.
	recs  []rec
	items []byte
}

// readErr is a failure of the input stream, reported after the last whole
// line read before it.
type readErr struct {
	format string
	err    error
}

func (e *readErr) Error() string { return e.format + ": " + e.err.Error() }

// reader cuts the decompressed input into blocks of whole lines and hands
// them to the workers and, in order, to the writer. It runs in its own
// goroutine.
func (sp *run) reader() {
	defer close(sp.work)
	defer close(sp.ordered)
	r := &stickyReader{r: sp.in.r}
	var carry []byte
	line := int64(0)
	for {
		b := sp.getBlock()
		if b == nil {
			return
		}
		buf := append(b.buf[:0], carry...)
		carry = carry[:0]
		var rerr error
		for rerr == nil {
			if len(buf) == cap(buf) {
				if bytes.IndexByte(buf, '\n') >= 0 || len(buf) > maxLineBytes {
					break
				}
				buf = slices.Grow(buf, len(buf)) // one line fills the block
			}
			var n int
			n, rerr = r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			sp.decompressed.Add(int64(n))
		}
		b.buf = buf
		switch cut := bytes.LastIndexByte(buf, '\n'); {
		case rerr == io.EOF:
			b.data = buf
		case rerr != nil:
			b.data = buf[:cut+1] // a partial last line is not a line
		case cut >= 0:
			b.data = buf[:cut+1]
			carry = append(carry, buf[cut+1:]...)
		default: // a line over MaxLineBytes: keep its start, skip the rest
			b.data, b.long = bytes.Clone(buf[:min(rawPrefix, len(buf))]), true
			carry, rerr = skipLine(r, buf, carry, &sp.decompressed)
		}
		if b.long {
			b.lines = 1
		} else {
			b.lines = int64(bytes.Count(b.data, []byte{'\n'}))
			if len(b.data) > 0 && b.data[len(b.data)-1] != '\n' {
				b.lines++
			}
		}
		b.first = line + 1
		line += b.lines
		if !sp.send(b, true) {
			return
		}
		if rerr != nil {
			if rerr != io.EOF {
				m := &block{err: &readErr{format: sp.in.format, err: rerr}, done: make(chan struct{}, 1)}
				m.done <- struct{}{}
				sp.send(m, false)
			}
			return
		}
	}
}

// skipLine reads and drops input up to the end of the current line. It
// returns what follows the line's newline. r must repeat its error.
func skipLine(r io.Reader, buf, carry []byte, counter *atomic.Int64) ([]byte, error) {
	tmp := buf[:cap(buf)]
	for {
		n, err := r.Read(tmp)
		counter.Add(int64(n))
		if i := bytes.IndexByte(tmp[:n], '\n'); i >= 0 {
			return append(carry, tmp[i+1:n]...), nil
		}
		if err != nil {
			return carry, err
		}
	}
}

// stickyReader repeats the first error of r.
type stickyReader struct {
	r   io.Reader
	err error
}

func (s *stickyReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	s.err = err
	return n, err
}

// send hands b to the workers (if toWorkers) and to the writer, in order.
func (sp *run) send(b *block, toWorkers bool) bool {
	select {
	case sp.ordered <- b:
	case <-sp.quit:
		return false
	}
	if toWorkers {
		select {
		case sp.work <- b:
		case <-sp.quit:
			return false
		}
	}
	return true
}

// getBlock returns a free block, or nil when the run is stopping.
func (sp *run) getBlock() *block {
	select {
	case b := <-sp.free:
		return b
	default:
	}
	if sp.blocks < cap(sp.free) {
		sp.blocks++
		return &block{buf: make([]byte, 0, blockSize), done: make(chan struct{}, 1)}
	}
	select {
	case b := <-sp.free:
		return b
	case <-sp.quit:
		return nil
	}
}

// putBlock recycles a block the writer is done with.
func (sp *run) putBlock(b *block) {
	if cap(b.buf) > 4*blockSize {
		b.buf = make([]byte, 0, blockSize) // drop the buffer of a huge line
	}
	if cap(b.items) > 4*blockSize {
		b.items = nil
	}
	b.data, b.long, b.err = nil, false, nil
	select {
	case sp.free <- b:
	default:
	}
}
