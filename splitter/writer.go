package splitter

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/wire"
)

const (
	chunksDir     = "chunks"
	maxOpenFiles  = 32        // chunk files held open at once (more groups reopen theirs)
	chunkBufBytes = 256 << 10 // write buffer per open chunk file
)

// group is the requests of one (url, model); it has at most one open chunk.
type group struct {
	url, model string
	seq        int // order of first appearance
	// The wire framing, file extension and limits of the group's chunks:
	// the writer's, or those of the family of url (sluice.RoutedCodec).
	env sluice.Envelope
	ext string
	lim sluice.Limits

	// The open chunk; n == 0 when there is none.
	tmp       string // its file while open (renamed when it closes)
	f         *os.File
	w         *bufio.Writer
	lastUse   int64
	n         int   // items in it
	size      int64 // bytes written to it so far (header, items, separators)
	itemBytes int64
	tokens    int64
	maxOut    int64 // sum of its requests' max output tokens
	noMax     int   // its requests that set none
	id        int64 // the open chunk's id, given when it opened

	// Under a minimum of requests per batch (minimum.go): the group's
	// requests not yet in a chunk, as the counting pass found them, and
	// the requests the open chunk is to hold (0: no such target).
	left   int
	target int

	// out is what w writes to: the open chunk's file, digested on the way
	// (Chunk.FileDigest, recorded with the chunk).
	out digestingFile
}

// digestingFile writes to a chunk file and feeds its chunk digest.
type digestingFile struct {
	f *os.File
	h *xxh3.Hasher128
}

func (d *digestingFile) Write(p []byte) (int, error) {
	d.h.Write(p) // never fails
	return d.f.Write(p)
}

type groupKey struct{ url, model string }

// writer takes the workers' records in input order: it checks uniqueness,
// gives ordinals, writes chunk files and feeds the sink. One goroutine.
type writer struct {
	sp     *run
	cfg    *Config
	env    sluice.Envelope
	ext    string
	groups map[groupKey]*group
	order  []*group
	ids    *idSet

	open   int   // groups with an open file handle
	tick   int64 // for the least recently used file handle
	nextID int64 // the id of the next chunk to open

	lines, requests, rejected, bytes int64
	chunks                           []sluice.Chunk

	rec      *recorder
	closed   bool // rec is closed
	rejects  *os.File
	rejectsW *bufio.Writer
	// rejected lines as results records for the merge (RejectedResults)
	rejRes  *os.File
	rejResW *bufio.Writer
	rejBuf  []byte
	// rejIDs maps the xxh3 hash of each custom_id that a rejected line
	// put in the output to that line's number: the output holds a
	// custom_id once, for the first line that has it. 16 bytes per such
	// line, not the id; two ids sharing all 64 bits (p ~ 2^-64 per pair)
	// would only reject the later line, never mix two answers.
	rejIDs   map[uint64]int64
	lastProg time.Time
	rows     []sluice.Request // request rows not yet handed to the recorder

	reuser *reuser  // nil without Config.Reuse
	copies *copySet // nil without Config.KeyScope
	legacy *copySet // numbers legacy keys; nil without Config.legacy
	slab   []byte   // where request keys are copied to (bodyKey)
}

func newWriter(sp *run) (*writer, error) {
	env := sp.cfg.Codec.Envelope()
	w := &writer{sp: sp, cfg: &sp.cfg, env: env, ext: extOf(env),
		groups: make(map[groupKey]*group), ids: new(idSet), nextID: 1}
	w.rec = newRecorder(sp.sink)
	w.rows = w.rec.batch()
	if sp.cfg.KeyScope != "" {
		w.copies = newCopySet()
	}
	if sp.cfg.legacy {
		w.legacy = newCopySet()
	}
	if rs, ok := sp.sink.(ReuseSink); ok && sp.cfg.Reuse && sp.cfg.KeyScope != "" {
		w.reuser = &reuser{sink: rs, sources: map[string]int64{}, open: map[string]*os.File{}}
	}
	if sp.cfg.SkipInvalid {
		// A user's file (--rejects): 0o666 less the umask.
		f, err := os.OpenFile(sp.cfg.RejectsPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		if err != nil {
			return w, fmt.Errorf("rejects file: %w", err)
		}
		w.rejects, w.rejectsW = f, bufio.NewWriterSize(f, 64<<10)
		rf, err := os.OpenFile(filepath.Join(sp.cfg.Dir, RejectedResults), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return w, fmt.Errorf("rejected results: %w", err)
		}
		w.rejRes, w.rejResW = rf, bufio.NewWriterSize(rf, 64<<10)
	}
	return w, nil
}

// consume handles every block in order, then closes the open chunks.
func (w *writer) consume() error {
	for b := range w.sp.ordered {
		<-b.done
		if err := w.sp.ctx.Err(); err != nil {
			return err
		}
		if b.err != nil {
			re := b.err.(*readErr)
			if re.format == "plain" {
				return fmt.Errorf("%s: read failed after line %d: %w", w.cfg.Input, w.lines, re.err)
			}
			return fmt.Errorf("%s: %s stream is truncated or corrupt after line %d: %w: %w",
				w.cfg.Input, re.format, w.lines, ErrCorrupt, re.err)
		}
		if err := w.block(b); err != nil {
			return err
		}
		w.sp.putBlock(b)
		w.sp.progress(w.lines, &w.lastProg, false)
	}
	if err := w.sp.ctx.Err(); err != nil {
		return err
	}
	for _, g := range w.order {
		if g.n > 0 {
			if err := w.closeChunk(g, "end"); err != nil {
				return err
			}
		}
	}
	if err := w.handRows(); err != nil {
		return err
	}
	w.closed = true
	if err := w.rec.close(); err != nil {
		return err
	}
	if w.reuser != nil {
		if err := w.reuser.close(w.cfg.Dir); err != nil {
			return err
		}
	}
	if err := syncDir(filepath.Join(w.cfg.Dir, chunksDir)); err != nil {
		return err
	}
	if w.rejects != nil {
		if err := w.rejectsW.Flush(); err != nil {
			return err
		}
		if err := w.rejects.Close(); err != nil {
			return err
		}
		w.rejects = nil
		if err := w.rejResW.Flush(); err != nil {
			return err
		}
		if err := w.rejRes.Sync(); err != nil {
			return err
		}
		if err := w.rejRes.Close(); err != nil {
			return err
		}
		w.rejRes = nil
	}
	w.sp.progress(w.lines, &w.lastProg, true)
	if w.requests == 0 {
		if w.rejected > 0 {
			return fmt.Errorf("%s: %w: all %d non-blank lines were rejected (see %s)",
				w.cfg.Input, ErrNoRequests, w.rejected, w.cfg.RejectsPath)
		}
		return fmt.Errorf("%s: %w: the input is empty", w.cfg.Input, ErrNoRequests)
	}
	return nil
}

func (w *writer) block(b *block) error {
	if w.legacy != nil {
		w.legacy.numberLegacy(b)
	}
	if w.copies != nil {
		w.copies.number(b)
	}
	var hits map[int]sluice.Answer
	if w.reuser != nil {
		var err error
		if hits, err = w.reuser.lookup(b); err != nil {
			return err
		}
	}
	for i := range b.recs {
		r := &b.recs[i]
		taken, err := w.check(r)
		if err != nil {
			return err
		}
		if r.reason != "" {
			if err := w.reject(b, r, taken); err != nil {
				return err
			}
			continue
		}
		if a, ok := hits[i]; ok {
			done, err := w.reuse(r, a)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := w.add(r, b.items[r.item:r.item+r.itemLen]); err != nil {
			return err
		}
	}
	w.lines = b.first + b.lines - 1
	return nil
}

// check makes a valid line whose custom_id an earlier line holds a
// duplicate (r.reason), and reports whether r's custom_id is already in
// the output: held by an earlier valid line, or by an earlier rejected one
// (--skip-invalid writes a rejected line with a custom_id to the output).
func (w *writer) check(r *rec) (taken bool, err error) {
	if r.reason == "" {
		line, err := w.firstLine(r.customID, r.hash)
		if line > 0 {
			r.reason = fmt.Sprintf("duplicate custom_id, first seen on line %d", line)
		}
		return line > 0, err
	}
	if !w.cfg.SkipInvalid || r.customID == "" {
		return false, nil
	}
	line, err := w.firstLine(r.customID, xxh3.HashString(r.customID))
	return line > 0, err
}

// firstLine returns the line of an earlier line whose custom_id id (of
// xxh3 hash h) is in the output, or 0. A valid line's id is recorded in
// w.ids as it is checked.
func (w *writer) firstLine(id string, h uint64) (int64, error) {
	if line, ok := w.rejIDs[h]; ok {
		return line, nil
	}
	if !w.ids.add(h) {
		return 0, nil
	}
	// The row may still be on its way to the sink.
	if err := w.handRows(); err != nil {
		return 0, err
	}
	if err := w.rec.sync(); err != nil {
		return 0, err
	}
	line, found, err := w.sp.sink.FindCustomID(id)
	if err != nil {
		return 0, fmt.Errorf("look up custom_id %q: %w", id, err)
	}
	if !found {
		return 0, nil // 48 bits of two ids agree, or the id is a rejected line's
	}
	return line, nil
}

// reject stops the run on a bad line, or writes it to the rejects file
// and the rejected results: with its custom_id (then in the output, in its
// input place) unless taken, when an earlier line holds that custom_id in
// the output (then only in the errors file, its custom_id null there).
func (w *writer) reject(b *block, r *rec, taken bool) error {
	if !w.cfg.SkipInvalid {
		return &LineError{File: w.cfg.Input, Line: r.line, CustomID: r.customID, Reason: r.reason}
	}
	w.rejected++
	out := struct {
		Line     int64  `json:"line"`
		CustomID string `json:"custom_id,omitempty"`
		Reason   string `json:"reason"`
		Raw      string `json:"raw"`
	}{r.line, r.customID, r.reason, string(b.data[r.raw : r.raw+r.rawLen])}
	j, err := json.Marshal(out)
	if err != nil {
		return err
	}
	w.rejectsW.Write(j)
	if err := w.rejectsW.WriteByte('\n'); err != nil {
		return err
	}
	// The line's place in the output: before the valid request that
	// comes next (ordinal w.requests), after the ones before it.
	id := r.customID
	if taken {
		id = ""
	} else if id != "" {
		if w.rejIDs == nil {
			w.rejIDs = map[uint64]int64{}
		}
		w.rejIDs[xxh3.HashString(id)] = r.line
	}
	w.rejBuf = wire.AppendResultRecord(w.rejBuf[:0], w.requests, true, RejectedLine(r.line, id, r.reason))
	_, err = w.rejResW.Write(w.rejBuf)
	return err
}

// RejectedResults is the file, in the job directory, where Split writes
// every line --skip-invalid rejected as a results record (see
// wire.AppendResultRecord) for the merge: the ordinal is that of the
// valid request that follows the line in the input (the number of valid
// requests before it), so the merge puts the line in its input place, and
// the record is the line's output line (RejectedLine). Records are in
// input order.
const RejectedResults = "rejected.results"

// RejectedCode is the error code of a rejected input line in the output
// and errors files.
const RejectedCode = sluice.CodeInvalidRequest

// RejectedLine is the output line of an input line rejected as invalid:
// its custom_id (null when none could be read), no response, and an error
// with code invalid_request, the reason and the line number.
func RejectedLine(line int64, customID, reason string) []byte {
	var id any
	if customID != "" {
		id = customID
	}
	b, _ := json.Marshal(struct {
		CustomID any               `json:"custom_id"`
		Response *sluice.Response  `json:"response"`
		Error    *sluice.LineError `json:"error"`
	}{id, nil, &sluice.LineError{Code: RejectedCode, Message: fmt.Sprintf("input line %d: %s", line, reason), Line: line}})
	return b
}

// add puts one valid request into its group's open chunk, closing that
// chunk first if the request would not fit.
func (w *writer) add(r *rec, item []byte) error {
	k := groupKey{r.url, r.model}
	g := w.groups[k]
	if g == nil {
		g = &group{url: r.url, model: r.model, seq: len(w.order), env: w.env, ext: w.ext, lim: w.cfg.Limits}
		if _, ok := w.cfg.Codec.(sluice.RoutedCodec); ok {
			c, lim := sluice.ChunkFormat(w.cfg.Codec, r.url, w.cfg.Limits)
			g.env, g.ext, g.lim = c.Envelope(), extOf(c.Envelope()), lim
		}
		w.groups[k] = g
		w.order = append(w.order, g)
		if err := w.counted(g); err != nil {
			return err
		}
	}
	lim := &g.lim
	size := int64(len(item))
	bound := lim.Bound(g.env, g.n, g.itemBytes, g.tokens, size, r.tokens)
	if bound == "" && g.target > 0 && g.n >= g.target {
		bound = "requests" // balanced under a minimum (minimum.go)
	}
	if bound != "" {
		if err := w.closeChunk(g, bound); err != nil {
			return err
		}
	}
	if err := w.handle(g); err != nil {
		return err
	}
	if g.n == 0 {
		g.w.Write(g.env.Header)
		g.size = int64(len(g.env.Header))
		g.target = balanced(g.left, lim)
	} else {
		g.w.Write(g.env.Sep)
		g.size += int64(len(g.env.Sep))
	}
	if _, err := g.w.Write(item); err != nil {
		return fmt.Errorf("write chunk: %w", err)
	}
	w.rows = append(w.rows, sluice.Request{Ordinal: w.requests, Line: r.line, CustomID: r.customID, Chunk: g.id,
		Index: g.n, Offset: g.size, Length: len(item), Tokens: r.tokens, Attempt: 1, State: sluice.RequestPending,
		BodyKey: w.bodyKey(r)})
	if r.maxOut >= 0 {
		g.maxOut += r.maxOut
	} else {
		g.noMax++
	}
	g.size += size
	g.n++
	g.left--
	g.itemBytes += size
	g.tokens += r.tokens
	w.requests++
	if len(w.rows) == cap(w.rows) {
		return w.handRows()
	}
	return nil
}

// handRows hands the request rows gathered so far to the recorder.
func (w *writer) handRows() error {
	if len(w.rows) == 0 {
		return nil
	}
	if err := w.rec.addRows(w.rows); err != nil {
		return err
	}
	w.rows = w.rec.batch()
	return nil
}

// handle makes sure g's open chunk has a file handle, opening the chunk's
// file if it has none yet and closing the least recently used handle when
// too many are open.
func (w *writer) handle(g *group) error {
	w.tick++
	g.lastUse = w.tick
	if g.f != nil {
		return nil
	}
	if w.open >= maxOpenFiles {
		var lru *group
		for _, o := range w.order {
			if o.f != nil && (lru == nil || o.lastUse < lru.lastUse) {
				lru = o
			}
		}
		if err := w.release(lru); err != nil {
			return err
		}
	}
	flag := os.O_WRONLY | os.O_APPEND
	if g.n == 0 {
		g.id = w.nextID
		w.nextID++
		g.tmp = filepath.Join(w.cfg.Dir, chunksDir, fmt.Sprintf(".open-c%06d", g.id))
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if g.out.h == nil {
			g.out.h = sluice.NewFileHash()
		}
		g.out.h.Reset()
	}
	f, err := os.OpenFile(g.tmp, flag, 0o600)
	if err != nil {
		return fmt.Errorf("chunk file: %w", err)
	}
	g.f, g.out.f = f, f
	if g.w == nil {
		g.w = bufio.NewWriterSize(&g.out, chunkBufBytes)
	} else {
		g.w.Reset(&g.out)
	}
	w.open++
	return nil
}

// release flushes and closes g's file handle; its chunk stays open.
func (w *writer) release(g *group) error {
	if err := g.w.Flush(); err != nil {
		return fmt.Errorf("write chunk: %w", err)
	}
	err := g.f.Close()
	g.f = nil
	w.open--
	return err
}

// closeChunk completes g's open chunk: footer, fsync, final name, then the
// chunk and its request rows go to the sink.
func (w *writer) closeChunk(g *group, bound string) error {
	if err := w.handle(g); err != nil {
		return err
	}
	g.w.Write(g.env.Footer) // the group's own: a local chunk of Anthropic lines ends in ]}
	g.size += int64(len(g.env.Footer))
	if err := g.w.Flush(); err != nil {
		return fmt.Errorf("write chunk: %w", err)
	}
	if min := g.lim.MinBatchRequests; min > 1 && g.n < min {
		return w.belowMinimum(g)
	}
	if want := g.env.Size(g.n, g.itemBytes); g.size != want {
		return fmt.Errorf("splitter: chunk of %d items is %d bytes, want %d", g.n, g.size, want)
	}
	rel := filepath.Join(chunksDir, fmt.Sprintf("c%06d-a1%s", g.id, g.ext))
	c := sluice.Chunk{ID: g.id, Attempt: 1, URL: g.url, Model: g.model, Path: rel, Requests: g.n,
		Bytes: g.size, EstTokens: g.tokens, State: sluice.ChunkPending, Bound: bound,
		MaxOutputTokens: g.maxOut, NoMaxRequests: g.noMax, FileDigest: sluice.FileDigestOf(g.out.h)}
	// The recorder fsyncs, closes and renames the file, and records it.
	f := g.f
	g.f = nil
	w.open--
	if err := w.rec.addChunk(&c, f, g.tmp, filepath.Join(w.cfg.Dir, rel)); err != nil {
		return err
	}
	w.chunks = append(w.chunks, c)
	w.bytes += g.size
	g.n, g.size, g.itemBytes, g.tokens, g.maxOut, g.noMax = 0, 0, 0, 0, 0, 0
	return nil
}

// cleanup closes what a failed run left open. Chunk files stay (the
// caller removes the job directory).
func (w *writer) cleanup() {
	for _, g := range w.order {
		if g.f != nil {
			g.f.Close()
			g.f = nil
		}
	}
	if !w.closed {
		w.rec.stop.Store(true)
		w.rec.close()
	}
	if w.rejects != nil {
		w.rejectsW.Flush()
		w.rejects.Close()
	}
	if w.rejRes != nil {
		w.rejRes.Close()
	}
	if w.reuser != nil {
		w.reuser.close(w.cfg.Dir)
	}
}

func (w *writer) result() *Result {
	// Chunks close in another order than they opened (and got their ids).
	slices.SortFunc(w.chunks, func(a, b sluice.Chunk) int { return cmp.Compare(a.ID, b.ID) })
	res := &Result{Lines: w.lines, Requests: w.requests, Rejected: w.rejected, Bytes: w.bytes, Chunks: w.chunks}
	if u := w.reuser; u != nil {
		res.Reused, res.ReuseSources, res.ReusedFiles, res.ReuseRefused = int64(u.idx), u.sources, u.files, u.refused
	}
	return res
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// extOf is the chunk file extension of an envelope: .jsonl for JSON
// lines, .json for one JSON document.
func extOf(env sluice.Envelope) string {
	if len(env.Header) > 0 || len(env.Footer) > 0 {
		return ".json"
	}
	return ".jsonl"
}
