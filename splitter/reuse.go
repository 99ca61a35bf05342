package splitter

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/wire"
)

// Reuse of earlier jobs' answers at planning (docs/money.md). For each
// block of lines the writer looks the valid requests' keys up in the
// ledger (one query per 256 keys: nothing of the ledger is held in
// memory); a request whose key has an answer is not put into a chunk: the
// answer's record is read from its results file, given the request's
// custom_id (the response stays byte for byte), and written to the job's
// own reused-NNNN.results files, so the job does not depend on the source
// job afterwards.
//
// Identical bodies within a job are never collapsed: the n-th copy of a
// body in a job has a key of its own (copySet), so it can only be
// answered by the n-th copy of an earlier job. A file of five samples per
// prompt run again reuses the five answers; with a sixth sample per
// prompt it buys only the sixth.

// copySet numbers the copies of each body within a job, in input order.
// Whether a body was seen is asked of a compact filter (48 bits per
// request, like the custom_id filter); only bodies seen more than once are
// counted in a map, so memory grows with the repeated bodies, not with
// every request.
type copySet struct {
	seen   *idSet
	counts map[[16]byte]uint32
}

func newCopySet() *copySet { return &copySet{seen: new(idSet), counts: map[[16]byte]uint32{}} }

// number gives each valid request of b the key of its copy: the body's
// key for the first copy, a key derived from it and n for the n-th repeat
// (also, with probability 2^-48, for a first copy the filter mistakes for
// a repeat: that request is bought, never answered wrongly).
func (c *copySet) number(b *block) {
	for i := range b.recs {
		if r := &b.recs[i]; r.reason == "" {
			r.key = c.copyOf(r.key)
		}
	}
}

// numberLegacy does for legacy keys what number does for keys, among the
// requests that have one (their body not in canonical form): the legacy
// key of the n-th copy of the same bytes, as it was numbered before keys
// were canonical. A request whose legacy key equals its key has none (it
// is looked up by its key), so no ledger answer is found for two requests
// of a job: a canonical form is never the bytes of a body not in that
// form.
func (c *copySet) numberLegacy(b *block) {
	for i := range b.recs {
		if r := &b.recs[i]; r.reason == "" && r.old != ([16]byte{}) {
			r.old = c.copyOf(r.old)
		}
	}
}

func (c *copySet) copyOf(k [16]byte) [16]byte {
	if !c.seen.add(binary.LittleEndian.Uint64(k[:8])) {
		return k
	}
	n := c.counts[k] + 1
	c.counts[k] = n
	return copyKey(k, n)
}

// copyKey is the key of the n-th repeat of a body whose key is k.
func copyKey(k [16]byte, n uint32) (out [16]byte) {
	var b [21]byte
	copy(b[:16], k[:])
	b[16] = '#'
	binary.LittleEndian.PutUint32(b[17:], n)
	sum := sha256.Sum256(b[:])
	copy(out[:], sum[:16])
	return out
}

// ReuseSink is a plan sink that can look keys up in the ledger.
type ReuseSink interface {
	LookupReuse(keys [][]byte, fn func(i int, a sluice.Answer) error) error
}

// LegacyKeySink is a ReuseSink that tells whether its ledger may hold
// answers under legacy keys (bodykey.go): a job planned before keys were
// canonical is in the state directory.
type LegacyKeySink interface {
	LegacyKeys() bool
}

const (
	reusedPerFile = 50_000 // records per reused-NNNN.results file
	maxSourceOpen = 8      // source results files held open
	keySlab       = 16 << 10
)

// reuser is the writer's reuse state.
type reuser struct {
	sink    ReuseSink
	files   []string
	f       *os.File
	w       *bufio.Writer
	n       int // records in the current file
	idx     int // reused requests so far (their index in chunk 0)
	sources map[string]int64
	refused int64
	open    map[string]*os.File
	buf     []byte
	rec     []byte // the source record read back
	line    []byte // the answer rewritten
	keys    [][]byte
	pos     []int
}

// lookup returns the ledger answers for the valid requests of b, by their
// index in b.recs: by key, then, for those without one, by legacy key.
func (u *reuser) lookup(b *block) (map[int]sluice.Answer, error) {
	var hits map[int]sluice.Answer
	for _, legacy := range []bool{false, true} {
		u.keys, u.pos = u.keys[:0], u.pos[:0]
		for i := range b.recs {
			r := &b.recs[i]
			switch {
			case r.reason != "":
			case !legacy:
				u.keys = append(u.keys, r.key[:])
				u.pos = append(u.pos, i)
			case r.old != [16]byte{}:
				if _, hit := hits[i]; !hit {
					u.keys = append(u.keys, r.old[:])
					u.pos = append(u.pos, i)
				}
			}
		}
		if len(u.keys) == 0 {
			continue
		}
		err := u.sink.LookupReuse(u.keys, func(i int, a sluice.Answer) error {
			if hits == nil {
				hits = map[int]sluice.Answer{}
			}
			hits[u.pos[i]] = a
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("look up earlier answers: %w", err)
		}
	}
	return hits, nil
}

// answer reads a's record back and rewrites it for custom_id; ok is false
// when the source cannot be used (deleted, changed, not a success).
func (u *reuser) answer(a sluice.Answer, customID string) (line []byte, ok bool) {
	f := u.open[a.Results]
	if f == nil {
		var err error
		if f, err = os.Open(a.Results); err != nil {
			return nil, false
		}
		if len(u.open) >= maxSourceOpen {
			for k, o := range u.open {
				o.Close()
				delete(u.open, k)
			}
		}
		u.open[a.Results] = f
	}
	if a.Length <= 0 || a.Length > 1<<30 {
		return nil, false
	}
	if cap(u.rec) < int(a.Length) {
		u.rec = make([]byte, a.Length)
	}
	rec := u.rec[:a.Length]
	if _, err := f.ReadAt(rec, a.Offset); err != nil {
		return nil, false
	}
	_, failed, old, err := wire.ParseResultRecord(rec)
	if err != nil || failed {
		return nil, false
	}
	oldID, _ := json.Marshal(a.CustomID)
	prefix := append([]byte(`{"custom_id":`), oldID...)
	if !bytes.HasPrefix(old, prefix) {
		return nil, false
	}
	newID, _ := json.Marshal(customID)
	u.line = append(append(append(u.line[:0], `{"custom_id":`...), newID...), old[len(prefix):]...)
	return u.line, true
}

// write appends a reused request's final record to the job's reused files.
func (u *reuser) write(dir string, ordinal int64, line []byte) error {
	if u.f == nil || u.n >= reusedPerFile {
		if err := u.closeFile(); err != nil {
			return err
		}
		rel := filepath.Join("results", fmt.Sprintf("reused-%04d.results", len(u.files)+1))
		if err := os.MkdirAll(filepath.Join(dir, "results"), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("reused results: %w", err)
		}
		u.f, u.n = f, 0
		if u.w == nil {
			u.w = bufio.NewWriterSize(f, 256<<10)
		} else {
			u.w.Reset(f)
		}
		u.files = append(u.files, rel)
	}
	u.buf = wire.AppendResultRecord(u.buf[:0], ordinal, false, line)
	if _, err := u.w.Write(u.buf); err != nil {
		return fmt.Errorf("reused results: %w", err)
	}
	u.n++
	return nil
}

// closeFile flushes, syncs and closes the current reused file.
func (u *reuser) closeFile() error {
	if u.f == nil {
		return nil
	}
	err := u.w.Flush()
	if err == nil {
		err = u.f.Sync()
	}
	if cerr := u.f.Close(); err == nil {
		err = cerr
	}
	u.f = nil
	if err != nil {
		return fmt.Errorf("reused results: %w", err)
	}
	return nil
}

// close ends reuse: the reused files are synced, sources closed.
func (u *reuser) close(dir string) error {
	for k, o := range u.open {
		o.Close()
		delete(u.open, k)
	}
	if err := u.closeFile(); err != nil {
		return err
	}
	if len(u.files) > 0 {
		return syncDir(filepath.Join(dir, "results"))
	}
	return nil
}

// reuse answers r from a, if a can be read back; done is false when r must
// be bought instead.
func (w *writer) reuse(r *rec, a sluice.Answer) (done bool, err error) {
	u := w.reuser
	line, ok := u.answer(a, r.customID)
	if !ok {
		u.refused++
		return false, nil
	}
	if err := u.write(w.cfg.Dir, w.requests, line); err != nil {
		return false, err
	}
	w.rows = append(w.rows, sluice.Request{Ordinal: w.requests, Line: r.line, CustomID: r.customID, Chunk: 0,
		Index: u.idx, Tokens: r.tokens, Attempt: 1, State: sluice.RequestSucceeded, BodyKey: w.bodyKey(r)})
	u.idx++
	u.sources[a.SourceJob]++
	w.requests++
	if len(w.rows) == cap(w.rows) {
		return true, w.handRows()
	}
	return true, nil
}

// bodyKey copies r's key out of its block (carved from a slab: one
// allocation per thousand requests), or nil without keys.
func (w *writer) bodyKey(r *rec) []byte {
	if w.cfg.KeyScope == "" {
		return nil
	}
	if len(w.slab) < 16 {
		w.slab = make([]byte, keySlab)
	}
	k := w.slab[:16:16]
	w.slab = w.slab[16:]
	copy(k, r.key[:])
	return k
}
