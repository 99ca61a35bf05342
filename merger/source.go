package merger

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// rec is one results record (see sluice.AppendResultRecord).
type rec struct {
	ord    int64
	failed bool
	raw    []byte // the whole record, framing included, without its newline
	json   []byte // the output line: raw after the framing
}

// parseHeader parses the framing "<ordinal>\t<s|f>\t" at the start of raw
// and returns the ordinal, the flag and the framing's length. It accepts what
// sluice.ParseResultRecord accepts (strconv.ParseInt's base-10 syntax, an
// ordinal >= 0), except an empty line after the framing and a framing longer
// than maxHeader bytes, without allocating.
func parseHeader(raw []byte) (ord int64, failed bool, hl int, ok bool) {
	i := 0
	neg := false
	if len(raw) > 0 && (raw[0] == '+' || raw[0] == '-') {
		neg = raw[0] == '-'
		i = 1
	}
	start := i
	var v uint64
	for ; i < len(raw) && raw[i] != '\t'; i++ {
		if i >= maxHeader-3 { // the framing, i+3 bytes, must fit in maxHeader
			return 0, false, 0, false
		}
		c := raw[i] - '0'
		if c > 9 {
			return 0, false, 0, false
		}
		if v > (math.MaxInt64-uint64(c))/10 {
			return 0, false, 0, false // overflow, or too large to be an ordinal
		}
		v = v*10 + uint64(c)
	}
	if i == start || neg && v != 0 || len(raw) < i+4 || raw[i+2] != '\t' {
		return 0, false, 0, false
	}
	switch raw[i+1] {
	case 's':
	case 'f':
		failed = true
	default:
		return 0, false, 0, false
	}
	return int64(v), failed, i + 3, true
}

// recordError reports a malformed record with its place.
func recordError(name string, off int64) error {
	return fmt.Errorf("merger: %s at byte %d: %w", name, off, errBadRecord)
}

// maxHeader bounds the framing (an ordinal written with absurdly many
// leading zeros is refused).
const maxHeader = 255

var errBadRecord = errors.New("malformed results record (want <ordinal>\\t<s|f>\\t<json>)")

// scanner reads the records of a file sequentially.
type scanner struct {
	name string
	r    *bufio.Reader
	off  int64  // offset of the next record
	long []byte // a record longer than r's buffer
	cur  rec
}

func newScanner(name string, r io.Reader, size int) *scanner {
	return &scanner{name: name, r: bufio.NewReaderSize(r, size)}
}

// next reads and parses the next record into s.cur; it returns false at the
// end of the file. s.cur's slices are valid until the next call.
func (s *scanner) next() (bool, error) {
	line, err := s.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		s.long = append(s.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if err != nil && err != io.EOF {
		return false, fmt.Errorf("merger: read %s: %w", s.name, err)
	}
	if len(line) == 0 {
		return false, nil
	}
	off := s.off
	s.off += int64(len(line))
	raw := bytes.TrimSuffix(line, []byte{'\n'})
	ord, failed, hl, ok := parseHeader(raw)
	if !ok {
		return false, recordError(s.name, off)
	}
	s.cur = rec{ord: ord, failed: failed, raw: raw, json: raw[hl:]}
	return true, nil
}

// entry locates one record of an indexed file: 24 bytes.
type entry struct {
	ord    int64
	off    int64
	n      uint32 // record length without the newline
	hl     uint8  // framing length
	failed bool
}

const entrySize = 24

// fileSource serves the records of one results file in ordinal order from a
// sorted index: from memory when the file was small enough to keep, else
// with ReadAt, one call per run of records that lie back to back on disk.
type fileSource struct {
	name string
	f    *os.File
	size int64
	idx  []entry
	i    int    // next entry
	data []byte // the whole file, when kept in memory
	buf  []byte // read window
	wOff int64  // file offset of buf[0]
	wEnd int    // entries below wEnd are in buf
	cur  rec
}

const (
	readWindow  = 256 << 10 // largest coalesced ReadAt
	indexBuffer = 1 << 20   // sequential read buffer of the index pass
)

// indexFile reads name once and builds its sorted index. When keep is true
// the file's bytes stay in memory and serve the records.
func indexFile(name string, keep bool, br *bufio.Reader) (*fileSource, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("merger: %w", err)
	}
	s := &fileSource{name: name, f: f}
	if err := s.build(keep, br); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *fileSource) build(keep bool, br *bufio.Reader) error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("merger: %w", err)
	}
	s.size = st.Size()
	// add indexes the record at off of length n (without its newline);
	// head holds at least its framing.
	add := func(head []byte, off, n int64) error {
		ord, failed, hl, ok := parseHeader(head[:min(int64(len(head)), n)])
		if !ok || hl >= int(n) {
			return recordError(s.name, off)
		}
		if n > math.MaxUint32 {
			return fmt.Errorf("merger: %s at byte %d: record longer than 4 GiB", s.name, off)
		}
		s.idx = append(s.idx, entry{ord: ord, off: off, n: uint32(n), hl: uint8(hl), failed: failed})
		return nil
	}
	if keep {
		s.data = make([]byte, s.size)
		if _, err := io.ReadFull(s.f, s.data); err != nil {
			return fmt.Errorf("merger: read %s: %w", s.name, err)
		}
		for off := 0; off < len(s.data); {
			n := bytes.IndexByte(s.data[off:], '\n')
			if n < 0 {
				n = len(s.data) - off
			}
			if err := add(s.data[off:off+n], int64(off), int64(n)); err != nil {
				return err
			}
			off += n + 1
		}
	} else {
		br.Reset(s.f)
		defer br.Reset(nil)
		var head []byte // the start of a record longer than br's buffer
		var off int64
		for {
			line, err := br.ReadSlice('\n')
			n := int64(len(line))
			if err == bufio.ErrBufferFull {
				head = append(head[:0], line[:min(len(line), maxHeader+1)]...)
				for err == bufio.ErrBufferFull {
					line, err = br.ReadSlice('\n')
					n += int64(len(line))
					head = append(head, line[:min(len(line), maxHeader+1-len(head))]...)
				}
				line = head
			}
			if err != nil && err != io.EOF {
				return fmt.Errorf("merger: read %s: %w", s.name, err)
			}
			if n == 0 {
				break
			}
			recLen := n
			if err == nil { // ends in a newline
				recLen--
			}
			if err := add(line, off, recLen); err != nil {
				return err
			}
			off += n
		}
	}
	s.idx = slices.Clip(s.idx)
	if !slices.IsSortedFunc(s.idx, cmpEntry) {
		slices.SortFunc(s.idx, cmpEntry)
	}
	return nil
}

func cmpEntry(a, b entry) int {
	if c := cmp.Compare(a.ord, b.ord); c != 0 {
		return c
	}
	return cmp.Compare(a.off, b.off)
}

// memory is what the source holds in memory.
func (s *fileSource) memory() int64 { return int64(cap(s.idx))*entrySize + int64(len(s.data)) }

func (s *fileSource) next() (bool, error) {
	if s.i >= len(s.idx) {
		s.buf = nil
		return false, nil
	}
	e := &s.idx[s.i]
	var raw []byte
	if s.data != nil {
		raw = s.data[e.off : e.off+int64(e.n)]
	} else {
		if s.i >= s.wEnd {
			if err := s.fill(); err != nil {
				return false, err
			}
		}
		raw = s.buf[e.off-s.wOff : e.off-s.wOff+int64(e.n)]
	}
	s.i++
	if len(raw) <= int(e.hl) {
		return false, recordError(s.name, e.off)
	}
	s.cur = rec{ord: e.ord, failed: e.failed, raw: raw, json: raw[e.hl:]}
	return true, nil
}

// fill reads the record s.i and those that follow it back to back on disk
// (up to readWindow bytes) into s.buf.
func (s *fileSource) fill() error {
	first := s.idx[s.i]
	end := first.off + int64(first.n)
	j := s.i + 1
	for ; j < len(s.idx); j++ {
		e := s.idx[j]
		if e.off != end+1 || e.off+int64(e.n)-first.off > readWindow {
			break
		}
		end = e.off + int64(e.n)
	}
	n := int(end - first.off)
	if cap(s.buf) < n || cap(s.buf) > 4*readWindow && n <= readWindow {
		s.buf = make([]byte, max(n, readWindow))
	}
	s.buf = s.buf[:n]
	if _, err := s.f.ReadAt(s.buf, first.off); err != nil {
		return fmt.Errorf("merger: read %s: %w", s.name, err)
	}
	s.wOff, s.wEnd = first.off, j
	return nil
}

func (s *fileSource) record() *rec { return &s.cur }

func (s *fileSource) close() error {
	s.idx, s.data, s.buf = nil, nil, nil
	return s.f.Close()
}

// runSource reads an intermediate run (records already in ordinal order).
type runSource struct {
	f *os.File
	*scanner
}

const runBuffer = 256 << 10

func openRun(name string) (*runSource, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("merger: %w", err)
	}
	return &runSource{f: f, scanner: newScanner(name, f, runBuffer)}, nil
}

func (s *runSource) record() *rec { return &s.cur }

// close closes and removes the run: runs are read once.
func (s *runSource) close() error {
	err := s.f.Close()
	os.Remove(s.name)
	return err
}

// source is a stream of records in ordinal order.
type source interface {
	next() (bool, error)
	record() *rec
	close() error
}

type heapItem struct {
	src source
	seq int // tie-break: equal ordinals come out in source order
}

type srcHeap []heapItem

func (h srcHeap) Len() int { return len(h) }
func (h srcHeap) Less(i, j int) bool {
	a, b := h[i].src.record().ord, h[j].src.record().ord
	return a < b || a == b && h[i].seq < h[j].seq
}
func (h srcHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *srcHeap) Push(x any)   { *h = append(*h, x.(heapItem)) }
func (h *srcHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeIter is a k-way merge by ordinal over sources.
type mergeIter struct {
	h   srcHeap
	adv bool // the top must be advanced before the next record
}

func newMergeIter(srcs []source) (*mergeIter, error) {
	m := &mergeIter{h: make(srcHeap, 0, len(srcs))}
	for i, s := range srcs {
		ok, err := s.next()
		if err != nil {
			return nil, err
		}
		if ok {
			m.h = append(m.h, heapItem{s, i})
		}
	}
	heap.Init(&m.h)
	return m, nil
}

// next returns the next record in ordinal order, or nil at the end. The
// record is valid until the next call.
func (m *mergeIter) next() (*rec, error) {
	if m.adv {
		m.adv = false
		ok, err := m.h[0].src.next()
		if err != nil {
			return nil, err
		}
		if ok {
			heap.Fix(&m.h, 0)
		} else {
			heap.Pop(&m.h)
		}
	}
	if len(m.h) == 0 {
		return nil, nil
	}
	m.adv = true
	return m.h[0].src.record(), nil
}
