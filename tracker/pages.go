package tracker

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/sluice-batch/sluice"
)

// Request pages (migrations/0009_request_pages.sql; docs/architecture.md,
// "The tracker's request records").
//
// A plan's requests go into request_pages, up to pageRows consecutive
// ordinals a page, each page one BLOB of packed entries, instead of a row
// each: writing a million rows (the table and its indexes) was 3 CPU
// seconds, reading them back 1 to 2 more, a third of a whole
// 1,000,000-request run. A page entry is what the plan decided and never
// changes. A request's state while it is the default is on its chunk:
// pending in its plan chunk, or succeeded when that chunk is settled on the
// chunk (settledOnChunk) or when it is in chunk 0 (answered from earlier
// jobs at planning). Anything else (moved to a retry chunk, failed, settled
// one by one) gives the request a full row in requests, an overlay, which
// is its record from then on; chunks.overlaid counts them per plan chunk.
// Retry chunks hold only overlay rows and are read and finished as before.

// pageRows is the most requests one page holds.
const pageRows = 1024

// appendEntry packs r after prev (the page's previous entry, or a zero
// Request) onto dst: line as a difference, then chunk, index, offset,
// length, tokens, custom_id and body key.
func appendEntry(dst []byte, r, prev *sluice.Request) []byte {
	dst = binary.AppendVarint(dst, r.Line-prev.Line)
	dst = binary.AppendVarint(dst, r.Chunk)
	dst = binary.AppendUvarint(dst, uint64(r.Index))
	dst = binary.AppendUvarint(dst, uint64(r.Offset))
	dst = binary.AppendUvarint(dst, uint64(r.Length))
	dst = binary.AppendUvarint(dst, uint64(r.Tokens))
	dst = binary.AppendUvarint(dst, uint64(len(r.CustomID)))
	dst = append(dst, r.CustomID...)
	dst = binary.AppendUvarint(dst, uint64(len(r.BodyKey)))
	return append(dst, r.BodyKey...)
}

var errBadPage = errors.New("request page is corrupt")

// pageDecoder reads a page's entries in order.
type pageDecoder struct {
	data []byte
	next int64 // ordinal of the next entry
	end  int64 // one past the page's last ordinal
	line int64 // the last entry's line: lines are packed as differences
	r    sluice.Request
}

func newPageDecoder(first int64, n int, data []byte) *pageDecoder {
	return &pageDecoder{data: data, next: first, end: first + int64(n)}
}

// entry decodes the next entry into d.r (custom_id and body key over the
// page's data), or returns false at the page's end. The page's data must
// not be written while they are held.
func (d *pageDecoder) entry() (bool, error) {
	if d.next >= d.end {
		if len(d.data) != 0 {
			return false, errBadPage
		}
		return false, nil
	}
	var v [8]int64
	for i := range v {
		var x int64
		var n int
		if i < 2 {
			x, n = binary.Varint(d.data)
		} else {
			var u uint64
			u, n = binary.Uvarint(d.data)
			x = int64(u)
		}
		if n <= 0 {
			return false, errBadPage
		}
		d.data = d.data[n:]
		v[i] = x
		if i == 6 { // custom_id's length: the id follows
			if x < 0 || x > int64(len(d.data)) {
				return false, errBadPage
			}
			// The id is the page's own bytes, not a copy: a page's data
			// is the driver's fresh copy of the row's blob
			// (eachPageEntry), never written again,
			// so a string over it is as immutable as any (and keeps the
			// page alive while it is held). A million ids a run are a
			// million allocations fewer.
			d.r.CustomID = ""
			if x > 0 {
				d.r.CustomID = unsafe.String(&d.data[0], int(x))
			}
			d.data = d.data[x:]
		}
	}
	k := v[7]
	if k < 0 || k > int64(len(d.data)) {
		return false, errBadPage
	}
	d.r.BodyKey = nil
	if k > 0 {
		d.r.BodyKey = d.data[:k:k]
	}
	d.data = d.data[k:]
	d.r.Ordinal = d.next
	d.line += v[0]
	d.r.Line = d.line // a caller may change d.r; the next entry does not read it
	d.r.Chunk, d.r.Index, d.r.Offset, d.r.Length, d.r.Tokens = v[1], int(v[2]), v[3], int(v[4]), v[5]
	d.r.Attempt, d.r.State = 1, sluice.RequestPending
	d.next++
	return true, nil
}

// pageBlob is a page's data as the driver gives it: the SQLite driver
// copies each row's blob into a fresh Go slice (TestPageBytesAreFreshEachRow),
// which is kept as is, not copied again as a []byte destination would be
// (200 MB a million requests). Unlike sql.RawBytes it holds no lock on the
// rows past Scan, and a value that is not a blob is an error, not text in a
// buffer the next row reuses.
type pageBlob []byte

func (b *pageBlob) Scan(src any) error {
	v, ok := src.([]byte)
	if !ok {
		return fmt.Errorf("request page: data is %T, want a blob", src)
	}
	*b = v
	return nil
}

// snapshot runs fn on a connection of its own inside one read
// transaction, so that the several statements of a reader see one state of
// the database (a FinishChunk committing between them would otherwise show
// a request in neither or both of its records). Plain BEGIN is deferred,
// whatever _txlock says: a reader takes no write lock.
func (d *DB) snapshot(ctx context.Context, fn func(q querier) error) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		return err
	}
	err = fn(conn)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); err == nil && rerr != nil {
		// A connection left inside a transaction must not go back to the pool.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		return rerr
	}
	return err
}

// querier is what reading pages needs of a database or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// eachPageEntry calls fn for every page entry of job key with an ordinal in
// [first, last], in ordinal order.
func eachPageEntry(ctx context.Context, q querier, key, first, last int64, fn func(*sluice.Request) error) error {
	// The page holding first starts at or before it.
	var from int64
	if err := q.QueryRowContext(ctx, sqliteStmts.q("page_first"),
		requestID(key, first), requestID(key, 0), requestID(key, first)).Scan(&from); err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, sqliteStmts.q("pages_of_range"),
		maxOrdinal, from, requestID(key, last))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var start int64
		var n int
		var data pageBlob
		if err := rows.Scan(&start, &n, &data); err != nil {
			return err
		}
		d := newPageDecoder(start, n, data)
		for {
			ok, err := d.entry()
			if err != nil {
				return fmt.Errorf("request page at #%d: %w", start, err)
			}
			if !ok {
				break
			}
			if d.r.Ordinal < first {
				continue
			}
			if d.r.Ordinal > last {
				break
			}
			if err := fn(&d.r); err != nil {
				return err
			}
		}
	}
	return rows.Err()
}

// scanOverlay reads an overlay row (the statements overlays and
// overlays_in_order).
func scanOverlay(rows *sql.Rows, r *sluice.Request) error {
	var state string
	var idx, length, attempt int64
	if err := rows.Scan(&r.Ordinal, &r.Line, &r.CustomID, &r.Chunk, &idx, &r.Offset, &length, &r.Tokens,
		&attempt, &state, &r.BodyKey); err != nil {
		return err
	}
	r.Index, r.Length, r.Attempt, r.State = int(idx), int(length), int(attempt), sluice.RequestState(state)
	return nil
}

// overlays returns the overlay rows of job key with ordinals in [first, last].
func overlays(ctx context.Context, q querier, key, first, last int64) (map[int64]*sluice.Request, error) {
	rows, err := q.QueryContext(ctx, sqliteStmts.q("overlays"),
		requestID(key, first), requestID(key, last))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[int64]*sluice.Request{}
	for rows.Next() {
		r := new(sluice.Request)
		if err := scanOverlay(rows, r); err != nil {
			return nil, err
		}
		m[r.Ordinal] = r
	}
	return m, rows.Err()
}

// pagedChunk is what reading a plan chunk of a paged job needs.
type pagedChunk struct {
	key, id     int64
	first, last int64
	settled     int
	n           int // requests the pages hold for it
	overlaid    int // of which have a row of their own
	sum, mix    int64
}

// idSum and idMix are a request id's terms in chunks.id_sum and id_mix:
// two independent 64-bit mixes of it (splitmix64's finalizer), so that
// two different sets of ids, however alike (one id twice in place of
// another, another chunk's ids between ours), have equal sums of both
// only by a 2^-128 chance.
func idSum(id int64) int64 { return int64(mix64(uint64(id))) }
func idMix(id int64) int64 { return int64(mix64(uint64(id) ^ 0x9e3779b97f4a7c15)) }

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// requests calls fn for each request of the chunk, in index order, with
// its current record: its overlay row if it has one (skipped when that
// row is in another chunk now), else its page entry, pending or, in a
// chunk settled on the chunk, succeeded. fromRow tells which.
func (c pagedChunk) requests(ctx context.Context, q querier, fn func(r *sluice.Request, fromRow bool) error) error {
	if c.first < 0 {
		return nil // no request
	}
	ov, err := overlays(ctx, q, c.key, c.first, c.last)
	if err != nil {
		return err
	}
	return eachPageEntry(ctx, q, c.key, c.first, c.last, func(r *sluice.Request) error {
		if r.Chunk != c.id {
			return nil // another group's request between two of ours
		}
		if o, ok := ov[r.Ordinal]; ok {
			if o.Chunk != c.id {
				return nil // moved to a retry chunk
			}
			cp := *o // fn may change it
			return fn(&cp, true)
		}
		if c.settled == settledOnChunk {
			r.State = sluice.RequestSucceeded
		}
		return fn(r, false)
	})
}

// readPagedChunk returns the chunk's facts: its job's key and its
// settledness for any chunk, and, when paged is true, its paged-plan facts;
// paged is false when the chunk's requests are not in pages (a job planned
// with a row per request, or a retry chunk). A chunk (or job) that is not
// there is ErrNotFound.
func readPagedChunk(ctx context.Context, q querier, job string, chunk int64) (c pagedChunk, paged bool, err error) {
	c = pagedChunk{id: chunk}
	var jobPaged, attempt int
	err = q.QueryRowContext(ctx, sqliteStmts.q("paged_chunk"), job, chunk).
		Scan(&c.key, &jobPaged, &attempt, &c.first, &c.last, &c.settled, &c.n, &c.overlaid, &c.sum, &c.mix)
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, fmt.Errorf("job %s, chunk %d: %w", job, chunk, ErrNotFound)
	}
	if err != nil {
		return c, false, err
	}
	return c, jobPaged == 1 && attempt == 1, nil
}

// insertOverlay writes r as its request's overlay row (overlayArgs).
var insertOverlay = sqliteStmts.q("overlay_insert")

func overlayArgs(key int64, r *sluice.Request) []any {
	var bk any
	if len(r.BodyKey) > 0 {
		bk = r.BodyKey
	}
	return []any{requestID(key, r.Ordinal), r.Line, r.CustomID, r.Chunk, r.Index, r.Offset, r.Length, r.Tokens,
		r.Attempt, string(r.State), bk}
}

// jobLayout returns a job's key and whether its plan is paged; found is
// false when there is no such job.
func jobLayout(ctx context.Context, q querier, job string) (key int64, paged, found bool, err error) {
	var p int
	err = q.QueryRowContext(ctx, sqliteStmts.q("job_layout"), job).Scan(&key, &p)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, false, nil
	}
	return key, p == 1, err == nil, err
}

// Requests calls fn for every request of a job in ordinal order, with its
// current record (tests and tools; the dispatcher reads by chunk).
func (d *DB) Requests(ctx context.Context, job string, fn func(*sluice.Request) error) error {
	return d.snapshot(ctx, func(q querier) error { return requests(ctx, q, job, fn) })
}

func requests(ctx context.Context, q querier, job string, fn func(*sluice.Request) error) error {
	key, paged, found, err := jobLayout(ctx, q, job)
	if err != nil || !found {
		return err
	}
	settled := map[int64]int{}
	crows, err := q.QueryContext(ctx, sqliteStmts.q("chunks_settled"), job)
	if err != nil {
		return err
	}
	for crows.Next() {
		var id int64
		var s int
		if err := crows.Scan(&id, &s); err != nil {
			crows.Close()
			return err
		}
		settled[id] = s
	}
	crows.Close()
	rows, err := q.QueryContext(ctx, sqliteStmts.q("overlays_in_order"),
		requestID(key, 0), requestID(key, maxOrdinal))
	if err != nil {
		return err
	}
	defer rows.Close()
	var row sluice.Request
	have := false
	nextRow := func() error {
		have = rows.Next()
		if !have {
			return rows.Err()
		}
		return scanOverlay(rows, &row)
	}
	if err := nextRow(); err != nil {
		return err
	}
	// A row's state as read: pending in a chunk settled on the chunk is
	// succeeded (finishOutcomes).
	fixed := func(r *sluice.Request) *sluice.Request {
		if r.State == sluice.RequestPending && settled[r.Chunk] == settledOnChunk {
			r.State = sluice.RequestSucceeded
		}
		return r
	}
	if paged {
		if err := eachPageEntry(ctx, q, key, 0, maxOrdinal, func(r *sluice.Request) error {
			for have && row.Ordinal < r.Ordinal { // a row without an entry: not expected, passed on
				if err := fn(fixed(&row)); err != nil {
					return err
				}
				if err := nextRow(); err != nil {
					return err
				}
			}
			if have && row.Ordinal == r.Ordinal {
				if err := fn(fixed(&row)); err != nil {
					return err
				}
				return nextRow()
			}
			if r.Chunk == 0 {
				r.State = sluice.RequestSucceeded // answered from earlier jobs
			}
			return fn(fixed(r))
		}); err != nil {
			return err
		}
	}
	for have {
		if err := fn(fixed(&row)); err != nil {
			return err
		}
		if err := nextRow(); err != nil {
			return err
		}
	}
	return nil
}

// finishPaged is FinishChunk's work on a plan chunk of a paged job (the
// chunk row is already updated; settledness read). A moved request gets an
// overlay row in its new chunk; failures get overlay rows in this chunk;
// the successes, when they are every request left, are settled on the
// chunk with no row written, else each gets a row too. Every request
// named must be pending in the chunk (ErrConflict otherwise).
func finishPaged(ctx context.Context, tx *sql.Tx, pc pagedChunk, f *sluice.Finish, moved []int64) error {
	if pc.settled != settledNot {
		return nil // FinishChunk refused any request named: nothing to do
	}
	if settleWhole(pc, f) {
		// Every request of the chunk succeeded, and the outcomes carry
		// what the ledger needs: settled on the chunk, no page read.
		answers := appendAnswers(make([]byte, 0, 80*len(f.Outcomes)), pc.key, f.Outcomes, func(i int) (string, []byte) {
			return f.Outcomes[i].CustomID, f.Outcomes[i].BodyKey
		})
		_, err := tx.ExecContext(ctx, sqliteStmts.q("chunk_settle"),
			settledOnChunk, answersArg(answers), f.Chunk.Job, f.Chunk.ID)
		return err
	}
	// The chunk's requests in ordinal order, every one pending (nothing
	// has settled them). A page entry's body key points into its page's
	// data, which no one reuses.
	ents := make([]sluice.Request, 0, pc.n)
	if err := pc.requests(ctx, tx, func(r *sluice.Request, fromRow bool) error {
		if fromRow || r.State != sluice.RequestPending {
			return fmt.Errorf("chunk %d: request #%d has a record of its own before the chunk finished: %w", pc.id, r.Ordinal, ErrConflict)
		}
		ents = append(ents, *r)
		return nil
	}); err != nil {
		return err
	}
	taken := make([]bool, len(ents))
	left := len(ents)
	take := func(ord int64) (*sluice.Request, error) {
		i, ok := slices.BinarySearchFunc(ents, ord, func(r sluice.Request, o int64) int { return cmp.Compare(r.Ordinal, o) })
		if !ok || taken[i] {
			return nil, fmt.Errorf("request #%d of chunk %d is no longer pending there: %w", ord, pc.id, ErrConflict)
		}
		taken[i] = true
		left--
		return &ents[i], nil
	}
	ins, err := tx.PrepareContext(ctx, insertOverlay)
	if err != nil {
		return err
	}
	defer ins.Close()
	overlaid := 0
	overlay := func(r *sluice.Request, what string) error {
		if _, err := ins.ExecContext(ctx, overlayArgs(pc.key, r)...); err != nil {
			return fmt.Errorf("%s request #%d: %w", what, r.Ordinal, err)
		}
		overlaid++
		return nil
	}
	for i, m := range f.Moved {
		e, err := take(m.Ordinal)
		if err != nil {
			return err
		}
		r := *e
		r.Chunk, r.Index, r.Offset, r.Length, r.Attempt, r.State = moved[i], m.Index, m.Offset, m.Length, m.Attempt, sluice.RequestPending
		if err := overlay(&r, "move"); err != nil {
			return err
		}
	}
	// Outcomes: each a final state, each pending here, each once.
	named := make([]*sluice.Request, len(f.Outcomes))
	var succeeded int
	for i, o := range f.Outcomes {
		if o.State != sluice.RequestSucceeded && o.State != sluice.RequestFailed {
			return fmt.Errorf("request #%d of chunk %d: %q is not a final state", o.Ordinal, pc.id, o.State)
		}
		e, err := take(o.Ordinal)
		if err != nil {
			return err
		}
		named[i] = e
		if o.State == sluice.RequestSucceeded {
			succeeded++
			continue
		}
		r := *e
		r.State = sluice.RequestFailed
		if err := overlay(&r, "record"); err != nil {
			return err
		}
	}
	mark := settledOnRows // as finishOutcomes: with no outcome, nothing left here is succeeded
	if left == 0 && succeeded > 0 {
		mark = settledOnChunk // the successes are every request left
	} else {
		for i, o := range f.Outcomes {
			if o.State != sluice.RequestSucceeded {
				continue
			}
			r := *named[i]
			r.State = sluice.RequestSucceeded
			if err := overlay(&r, "record"); err != nil {
				return err
			}
		}
	}
	answers := appendAnswers(make([]byte, 0, 80*succeeded), pc.key, f.Outcomes, func(i int) (string, []byte) {
		return named[i].CustomID, named[i].BodyKey
	})
	_, err = tx.ExecContext(ctx, sqliteStmts.q("chunk_settle_paged"),
		mark, answersArg(answers), overlaid, f.Chunk.Job, f.Chunk.ID)
	return err
}

// settleWhole reports whether f's outcomes are successes of exactly the
// chunk's requests, none with a row of its own, each naming its custom_id.
// Anything else, and any chunk whose span it shares with another group's
// requests, goes the strict way (each request found in the pages).
func settleWhole(pc pagedChunk, f *sluice.Finish) bool {
	// As many distinct ordinals inside the chunk's span as it has
	// requests, with the plan's two sums of mixes of their ids: its
	// requests (idSum). Where the span holds only the chunk's own requests
	// (every chunk of a single-model input) the count alone proves it.
	if len(f.Moved) > 0 || pc.overlaid != 0 || len(f.Outcomes) != pc.n || pc.n == 0 {
		return false
	}
	seen := make([]uint64, (pc.last-pc.first+64)/64)
	var sum, mix int64
	for _, o := range f.Outcomes {
		if o.State != sluice.RequestSucceeded || o.CustomID == "" || o.Ordinal < pc.first || o.Ordinal > pc.last {
			return false
		}
		k := o.Ordinal - pc.first
		if seen[k/64]&(1<<(k%64)) != 0 {
			return false // named twice: the strict path names it
		}
		seen[k/64] |= 1 << (k % 64)
		id := requestID(pc.key, o.Ordinal)
		sum, mix = sum+idSum(id), mix+idMix(id)
	}
	return sum == pc.sum && mix == pc.mix
}

// appendJSONString appends s as a JSON string: as it is between quotes
// when it is printable ASCII with nothing to escape (nearly every
// custom_id), else as encoding/json writes it.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
