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

// rec is one results record (see wire.AppendResultRecord).
type rec struct {
	ord    int64
	failed bool
	raw    []byte // the whole record, framing included, without its newline
	json   []byte // the output line: raw after the framing
}

// parseHeader parses the framing "<ordinal>\t<s|f>\t" at the start of raw
// and returns the ordinal, the flag and the framing's length. It accepts what
// wire.ParseResultRecord accepts (strconv.ParseInt's base-10 syntax, an
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

// fileSource serves the records of one results file in ordinal order,
// in one of three ways:
//
//   - kept: the file was small enough to read into memory whole;
//   - windowed: records in any order whose ordinals are dense enough (a
//     chunk's results, shuffled by the provider) and no ordinal twice.
//     slots maps each ordinal to its record (idx stays in file order: no
//     sort), and the records of a window of ordinals are read in one
//     sequential pass over the part of the file that holds them, into a
//     buffer of at most windowMax bytes taken from the merge's windowPool.
//     A file is read at most maxPasses times: when the pool cannot give a
//     window that large, the record is read alone with ReadAt;
//   - otherwise from the sorted index with ReadAt, one call per run of
//     records that lie back to back on disk (a file already in order is
//     read sequentially that way).
//
// The bytes of a record are read only when load is called for it (the
// merge heap orders sources by ordinal alone), so of files whose ordinal
// ranges follow each other only one holds a window at a time.
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
	want *entry // cur's entry while its bytes are not loaded

	// Windowed mode.
	pool     *windowPool
	slots    []uint32 // slots[o-lo] = 1 + index in idx of ordinal o's record; 0: none
	lo       int64    // smallest ordinal
	o        int      // next slot to look at
	wlo      int      // slots [wlo, whi) are in buf
	whi      int
	at       []uint32 // at[x]: offset in buf of the record of slot wlo+x
	granted  int64    // bytes held from pool: the window buffer's size
	win      []byte   // the window buffer from pool, while granted
	scratch  []byte
	one      []byte // a record read alone
	recBytes int64  // bytes of all records
	served   int64  // bytes of the records read so far
}

const (
	readWindow  = 256 << 10 // largest coalesced ReadAt
	indexBuffer = 1 << 20   // sequential read buffer of the index pass
)

// Windowed reading (variables for tests).
var (
	// windowMax is the largest window buffer of one file.
	windowMax int64 = 16 << 20
	// windowPoolSize bounds the window buffers of all files of a merge.
	windowPoolSize int64 = 48 << 20
	// maxPasses: a file needing more windows than this is read with ReadAt.
	maxPasses int64 = 8
	// windowScratch is the sequential read size of a pass.
	windowScratch = 1 << 20
)

// windowPool is the budget of window buffers shared by the sources of a
// merge.
type windowPool struct {
	size  int64    // the most the pool's buffers may hold in all
	inUse int64    // capacity of the buffers handed out
	spare [][]byte // buffers given back, kept for the next take
	held  int64    // capacity of spare
}

func newWindowPool() *windowPool { return &windowPool{size: windowPoolSize} }

// avail is how much a take may still get.
func (p *windowPool) avail() int64 {
	if p == nil {
		return 0
	}
	return p.size - p.inUse
}

// take hands out a buffer of n bytes: a spare one big enough (the
// smallest), else a new one once spares are dropped to make room. The
// buffers go round between the files of a merge rather than being
// allocated per window: a new 16 MiB buffer for each window left the
// collector 190 MB of garbage in a 1,000,000-request merge (peak RSS 390
// MB against 267 MB before it).
func (p *windowPool) take(n int64) ([]byte, bool) {
	if p == nil || n > p.avail() {
		return nil, false
	}
	best := -1
	for i, b := range p.spare {
		if c := int64(cap(b)); c >= n && c <= p.avail() && (best < 0 || c < int64(cap(p.spare[best]))) {
			best = i
		}
	}
	if best >= 0 {
		b := p.spare[best]
		p.spare = append(p.spare[:best], p.spare[best+1:]...)
		p.held -= int64(cap(b))
		p.inUse += int64(cap(b))
		return b[:n], true
	}
	for len(p.spare) > 0 && p.inUse+p.held+n > p.size {
		last := len(p.spare) - 1
		p.held -= int64(cap(p.spare[last]))
		p.spare[last] = nil
		p.spare = p.spare[:last]
	}
	p.inUse += n
	return make([]byte, n), true
}

// give takes back a buffer from take (nil: none).
func (p *windowPool) give(b []byte) {
	if p == nil || b == nil {
		return
	}
	p.inUse -= int64(cap(b))
	p.spare = append(p.spare, b[:0])
	p.held += int64(cap(b))
}

// indexFile reads name once and builds its sorted index. When keep is true
// the file's bytes stay in memory and serve the records.
// Without keep, a file in any order may be served in windows from pool
// (nil: never).
func indexFile(name string, keep bool, br *bufio.Reader, pool *windowPool) (*fileSource, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("merger: %w", err)
	}
	s := &fileSource{name: name, f: f, pool: pool}
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
	if slices.IsSortedFunc(s.idx, cmpEntry) {
		return nil
	}
	if s.data == nil && s.pool != nil && s.slotIndex() {
		return nil
	}
	slices.SortFunc(s.idx, cmpEntry)
	return nil
}

// slotIndex sets up windowed mode when the file suits it: ordinals dense
// enough (a range under 16 times the records: a chunk of one of several
// interleaved (url, model) groups), none twice, and few passes.
func (s *fileSource) slotIndex() bool {
	if s.size > maxPasses*windowMax || len(s.idx) >= math.MaxUint32 {
		return false
	}
	lo, hi := s.idx[0].ord, s.idx[0].ord
	for _, e := range s.idx {
		lo, hi = min(lo, e.ord), max(hi, e.ord)
	}
	if uint64(hi-lo) >= 16*uint64(len(s.idx)) {
		return false
	}
	slots := make([]uint32, hi-lo+1)
	for k, e := range s.idx {
		sl := &slots[e.ord-lo]
		if *sl != 0 {
			return false // an ordinal twice: the sorted index orders them by offset
		}
		*sl = uint32(k + 1)
		s.recBytes += int64(e.n)
	}
	s.slots, s.lo = slots, lo
	return true
}

func cmpEntry(a, b entry) int {
	if c := cmp.Compare(a.ord, b.ord); c != 0 {
		return c
	}
	return cmp.Compare(a.off, b.off)
}

// memory is what the source holds in memory (window buffers are counted
// by the pool).
func (s *fileSource) memory() int64 {
	return int64(cap(s.idx))*entrySize + int64(len(s.data)) + 4*int64(cap(s.slots))
}

// next moves to the next record: its ordinal and flag are known at once,
// its bytes after load.
func (s *fileSource) next() (bool, error) {
	if s.slots != nil {
		for s.o < len(s.slots) && s.slots[s.o] == 0 {
			s.o++
		}
		if s.o == len(s.slots) {
			s.release()
			return false, nil
		}
		e := &s.idx[s.slots[s.o]-1]
		s.o++
		s.cur, s.want = rec{ord: e.ord, failed: e.failed}, e
		return true, nil
	}
	if s.i >= len(s.idx) {
		s.buf = nil
		return false, nil
	}
	e := &s.idx[s.i]
	s.i++
	s.cur, s.want = rec{ord: e.ord, failed: e.failed}, e
	return true, nil
}

// load reads the bytes of the current record.
func (s *fileSource) load() error {
	e := s.want
	if e == nil {
		return nil
	}
	s.want = nil
	var raw []byte
	switch {
	case s.data != nil:
		raw = s.data[e.off : e.off+int64(e.n)]
	case s.slots != nil:
		x := int(e.ord - s.lo)
		if x < s.wlo || x >= s.whi {
			if err := s.window(x); err != nil {
				return err
			}
		}
		at := int(s.at[x-s.wlo])
		raw = s.buf[at : at+int(e.n)]
	default:
		if s.i-1 >= s.wEnd {
			if err := s.fill(s.i - 1); err != nil {
				return err
			}
		}
		raw = s.buf[e.off-s.wOff : e.off-s.wOff+int64(e.n)]
	}
	if len(raw) <= int(e.hl) {
		return recordError(s.name, e.off)
	}
	s.cur.raw, s.cur.json = raw, raw[e.hl:]
	return nil
}

// window reads the records of slots x, x+1, ... (as many as fit in a
// window) into s.buf, in ordinal order, in one sequential pass over the
// part of the file that holds them; s.at tells where each is. Without
// room in the pool it reads slot x's record alone.
func (s *fileSource) window(x int) error {
	// The window's size: the rest of the file up to windowMax, or what the
	// pool has left, but never so small that the file would take more than
	// maxPasses passes; else this record alone, with ReadAt.
	e := s.idx[s.slots[x]-1]
	rest := s.recBytes - s.served
	least := max(int64(e.n), min(rest, (s.recBytes+maxPasses-1)/maxPasses))
	if s.granted < least {
		s.pool.give(s.win)
		s.granted, s.win, s.buf = 0, nil, nil
		// Half of what the pool has left (at least the least), so that the
		// files of groups merged side by side all get a window.
		free := s.pool.avail()
		g := min(max(windowMax, int64(e.n)), rest, free, max(least, free/2))
		if g >= least {
			if b, ok := s.pool.take(g); ok {
				s.granted, s.win, s.buf = g, b, b
			}
		}
	}
	if s.granted == 0 {
		if cap(s.one) < int(e.n) {
			s.one = make([]byte, e.n)
		}
		s.buf = s.one[:e.n]
		if _, err := s.f.ReadAt(s.buf, e.off); err != nil {
			return fmt.Errorf("merger: read %s: %w", s.name, err)
		}
		s.served += int64(e.n)
		s.wlo, s.whi = x, x+1
		s.at = append(s.at[:0], 0)
		return nil
	}
	// The window: slots from x whose records fit in the buffer.
	var size int64
	minK, maxK := len(s.idx), -1
	end := x
	for ; end < len(s.slots); end++ {
		k := int(s.slots[end]) - 1
		if k < 0 {
			continue
		}
		n := int64(s.idx[k].n)
		if size+n > s.granted && end > x {
			break
		}
		size += n
		minK, maxK = min(minK, k), max(maxK, k)
	}
	s.served += size
	s.buf = s.win[:s.granted]
	s.wlo, s.whi = x, end
	if cap(s.at) < end-x {
		s.at = make([]uint32, end-x)
	}
	s.at = s.at[:end-x]
	// Lay the window out in ordinal order, so that the merge reads it
	// front to back, then fill it in one pass over the part of the file
	// that holds its records.
	pos := 0
	for y := range end - x {
		if k := int(s.slots[x+y]) - 1; k >= 0 {
			s.at[y] = uint32(pos)
			pos += int(s.idx[k].n)
		}
	}
	s.buf = s.buf[:pos]
	if s.scratch == nil {
		s.scratch = make([]byte, windowScratch)
	}
	last := s.idx[maxK]
	var sOff, sEnd int64 // file range in scratch
	for k := minK; k <= maxK; k++ {
		e := &s.idx[k]
		y := int(e.ord-s.lo) - x
		if y < 0 || y >= end-x {
			continue
		}
		dst := s.buf[s.at[y] : int(s.at[y])+int(e.n)]
		rEnd := e.off + int64(e.n)
		if e.off >= sOff && rEnd <= sEnd {
			copy(dst, s.scratch[e.off-sOff:rEnd-sOff])
			continue
		}
		if int(e.n) > len(s.scratch) { // longer than a read: straight into buf
			if _, err := s.f.ReadAt(dst, e.off); err != nil {
				return fmt.Errorf("merger: read %s: %w", s.name, err)
			}
			continue
		}
		sOff, sEnd = e.off, min(e.off+int64(len(s.scratch)), last.off+int64(last.n))
		if _, err := s.f.ReadAt(s.scratch[:sEnd-sOff], sOff); err != nil {
			return fmt.Errorf("merger: read %s: %w", s.name, err)
		}
		copy(dst, s.scratch)
	}
	return nil
}

// release gives the window back to the pool.
func (s *fileSource) release() {
	s.pool.give(s.win)
	s.granted, s.win, s.buf, s.scratch, s.at, s.one = 0, nil, nil, nil, nil, nil
}

// fill reads the record i and those that follow it back to back on disk
// (up to readWindow bytes) into s.buf.
func (s *fileSource) fill(i int) error {
	first := s.idx[i]
	end := first.off + int64(first.n)
	j := i + 1
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
	s.release()
	s.idx, s.data, s.slots = nil, nil, nil
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

func (s *runSource) load() error { return nil }

// close closes and removes the run: runs are read once.
func (s *runSource) close() error {
	err := s.f.Close()
	os.Remove(s.name)
	return err
}

// source is a stream of records in ordinal order. After next, record's
// ordinal and flag are set; its bytes after load.
type source interface {
	next() (bool, error)
	record() *rec
	load() error
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
	if err := m.h[0].src.load(); err != nil {
		return nil, err
	}
	return m.h[0].src.record(), nil
}
