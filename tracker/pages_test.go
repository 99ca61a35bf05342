package tracker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/tracker"
)

// TestPlanIsPagedNotRows: a plan of 2,500 requests in two groups whose
// chunks interleave writes no request row, three pages (1,024 ordinals
// each), and each chunk's span; every reader gives back what was planned:
// ChunkRequests a chunk's own requests in index order (none of the other
// group's between them), Expected every custom_id in ordinal order,
// RequestStates the counts, Requests every field, body keys included. A
// finish that moves, fails and succeeds requests then writes rows for the
// moved and failed ones only, and the readers follow.
func TestPlanIsPagedNotRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t)
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir(), MaxAttempts: 3})).Must(t, "BeginPlan")
	const n = 2500
	var planned []sluice.Request
	idx := map[int64]int{}
	for i := 0; i < n; i++ {
		chunk := int64(1 + i%2) // two groups, one chunk each, interleaved
		if i%5 == 0 {
			chunk = 0 // answered from an earlier job
		}
		r := sluice.Request{Ordinal: int64(i), Line: int64(2*i + 1), CustomID: fmt.Sprintf("id-%d", i), Chunk: chunk,
			Index: idx[chunk], Offset: int64(100 * idx[chunk]), Length: 90 + i%7, Tokens: int64(i % 300), Attempt: 1,
			State: sluice.RequestPending}
		if i%3 != 0 {
			r.BodyKey = []byte(fmt.Sprintf("key-%012d", i))
		}
		idx[chunk]++
		planned = append(planned, r)
	}
	for i := 0; i < n; i += 300 {
		check.NoErr(t, "AddRequests", p.AddRequests(planned[i:min(n, i+300)]))
	}
	for _, c := range []int64{1, 2} {
		check.NoErr(t, "AddChunk", p.AddChunk(&sluice.Chunk{ID: c, URL: "/v1/chat/completions", Model: "m", Path: fmt.Sprint("chunks/c", c), Requests: idx[c]}))
	}
	check.NoErr(t, "SetReused", p.SetReused(int64(idx[0]), map[string]int64{"old": int64(idx[0])}))
	check.NoErr(t, "Commit", p.Commit(ctx, sluice.Fingerprint{Size: 1, ModTime: time.Unix(1, 0)}, n, 0))
	var rows, pages int
	db.SQL().QueryRow(`SELECT COUNT(*) FROM requests`).Scan(&rows)
	db.SQL().QueryRow(`SELECT COUNT(*) FROM request_pages`).Scan(&pages)
	check.Fatal(t, "request rows and pages, want 0 and 3", []int{rows, pages}, rows == 0, pages == 3)
	var first, last, paged int64
	db.SQL().QueryRow(`SELECT first_ordinal, last_ordinal, paged FROM chunks WHERE id = 2`).Scan(&first, &last, &paged)
	check.Error(t, fmt.Sprintf("chunk 2's span and count, want 1..2499 of %d", idx[2]), []int64{first, last, paged}, first == 1, last == 2499, paged == int64(idx[2]))

	want := func(chunk int64) []sluice.Request {
		var out []sluice.Request
		for _, r := range planned {
			if r.Chunk == chunk {
				out = append(out, r)
			}
		}
		return out
	}
	read := func(chunk int64) []sluice.Request {
		t.Helper()
		var got []sluice.Request
		if err := db.ChunkRequests(ctx, "j", chunk, func(r *sluice.Request) error {
			c := *r
			c.BodyKey = slices.Clone(r.BodyKey)
			got = append(got, c)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []int64{1, 2} {
		if got, w := read(c), want(c); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("chunk %d: %d requests read, want %d; first %v, want %v", c, len(got), len(w), got[:1], w[:1])
		}
	}
	var ids []string
	check.NoErr(t, "Expected", db.Expected(ctx, "j", func(o int64, id string) bool {
		check.Fatal(t, fmt.Sprintf("expected ordinal after %d", len(ids)), o, o == int64(len(ids)))
		ids = append(ids, id)
		return true
	}))
	check.Fatal(t, "Expected: ids", len(ids), len(ids) == n)
	check.Fatal(t, "Expected: last id", ids[n-1], ids[n-1] == "id-2499")
	states := func() string {
		st := check.Try(db.RequestStates(ctx, "j")).Must(t, "RequestStates")
		return fmt.Sprint(st)
	}
	if got, w := states(), fmt.Sprint(map[sluice.RequestState]int64{sluice.RequestPending: int64(idx[1] + idx[2]),
		sluice.RequestSucceeded: int64(idx[0])}); got != w {
		t.Errorf("states %s, want %s", got, w)
	}

	// Chunk 1 ends: its first two requests move to a retry chunk, the next
	// three fail, the rest succeed.
	c1 := want(1)
	cs, _ := db.Chunks(ctx, "j")
	ch := cs[0]
	ch.State, ch.ResultsPath = sluice.ChunkDone, "results/c1"
	f := &sluice.Finish{Chunk: ch, From: sluice.ChunkPending,
		NewChunks: []*sluice.Chunk{{Attempt: 2, URL: "/v1/chat/completions", Model: "m", Path: "chunks/c3", Requests: 2, State: sluice.ChunkPending}}}
	for i, r := range c1 {
		switch {
		case i < 2:
			f.Moved = append(f.Moved, sluice.Request{Ordinal: r.Ordinal, Chunk: sluice.NewChunkRef(0), Index: i, Offset: int64(10 * i), Length: 10, Attempt: 2})
		case i < 5:
			f.Outcomes = append(f.Outcomes, sluice.Outcome{Ordinal: r.Ordinal, State: sluice.RequestFailed})
		default:
			f.Outcomes = append(f.Outcomes, sluice.Outcome{Ordinal: r.Ordinal, State: sluice.RequestSucceeded, Offset: int64(i), Length: 1})
		}
	}
	check.NoErr(t, "FinishChunk", db.FinishChunk(ctx, f))
	db.SQL().QueryRow(`SELECT COUNT(*) FROM requests`).Scan(&rows)
	if rows != 5 {
		t.Errorf("%d request rows after the finish, want 5 (2 moved, 3 failed)", rows)
	}
	if got, w := states(), fmt.Sprint(map[sluice.RequestState]int64{sluice.RequestPending: int64(idx[2] + 2),
		sluice.RequestFailed: 3, sluice.RequestSucceeded: int64(idx[0] + idx[1] - 5)}); got != w {
		t.Errorf("states after the finish %s, want %s", got, w)
	}
	got := read(3)
	check.Fatal(t, "the retry chunk reads", got, len(got) == 2)
	check.Error(t, "the retry chunk reads", got, got[0].CustomID == c1[0].CustomID, got[1].Attempt == 2, got[1].Line == c1[1].Line,
		got[1].Tokens == c1[1].Tokens, got[1].Offset == 10)
	retried, err := db.RetriedRequests(ctx, "j")
	check.Error(t, "retried, want 2", fmt.Sprint(retried, err), retried == 2, err == nil)
	byState := map[sluice.RequestState]int{}
	for _, r := range read(1) {
		byState[r.State]++
	}
	check.Error(t, "chunk 1 after the finish", byState, byState[sluice.RequestFailed] == 3, byState[sluice.RequestSucceeded] == len(c1)-5, len(read(1)) == len(c1)-2)
	// Requests: every request once, in order, with its record.
	var all []sluice.Request
	check.NoErr(t, "Requests", db.Requests(ctx, "j", func(r *sluice.Request) error { all = append(all, *r); return nil }))
	check.Fatal(t, "Requests", len(all), len(all) == n)
	check.Error(t, "Requests: moved, failed", []sluice.Request{all[c1[0].Ordinal], all[c1[2].Ordinal]}, all[c1[0].Ordinal].Chunk == 3,
		string(all[c1[1].Ordinal].BodyKey) == string(c1[1].BodyKey), all[c1[2].Ordinal].State == sluice.RequestFailed,
		all[c1[9].Ordinal].State == sluice.RequestSucceeded, all[0].State == sluice.RequestSucceeded, all[1].State == sluice.RequestPending)
	// A second finish of chunk 1's requests is a conflict.
	ch.State = sluice.ChunkDone
	db.SQL().Exec(`UPDATE chunks SET state = 'pending' WHERE id = 1`)
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: ch, From: sluice.ChunkPending, Outcomes: f.Outcomes[:1]}); err == nil {
		t.Error("a second finish of the same requests was taken")
	}
	check.NoErr(t, "DeleteJob", db.DeleteJob(ctx, "j"))
	db.SQL().QueryRow(`SELECT COUNT(*) FROM request_pages`).Scan(&pages)
	if pages != 0 {
		t.Errorf("%d pages left after DeleteJob", pages)
	}
}

// TestPagedFinishRefusesStrangers: a paged chunk's finish that names a
// request of another chunk, or one twice, is a conflict and changes
// nothing.
func TestPagedFinishRefusesStrangers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t)
	c := planKeyed(t, db, "j", make([][]byte, 4))
	for _, f := range []*sluice.Finish{
		{Outcomes: []sluice.Outcome{{Ordinal: 0, State: sluice.RequestSucceeded}, {Ordinal: 9, State: sluice.RequestSucceeded}}},
		{Outcomes: []sluice.Outcome{{Ordinal: 1, State: sluice.RequestFailed}, {Ordinal: 1, State: sluice.RequestSucceeded}}},
		{Moved: []sluice.Request{{Ordinal: 7, Chunk: 5, Attempt: 2}}},
	} {
		cc := *c
		f.Chunk, f.From = &cc, sluice.ChunkPending
		if err := db.FinishChunk(ctx, f); err == nil {
			t.Errorf("finish %+v taken", f)
		}
	}
	st, _ := db.RequestStates(ctx, "j")
	if st[sluice.RequestPending] != 4 || len(st) != 1 {
		t.Errorf("states after refused finishes: %v", st)
	}
}

// TestPagedWholeSuccessReadsNoPage: outcomes that succeed every request of
// a paged chunk and name their custom_ids and keys settle it on the chunk
// from the plan's sums, and the ledger gets their answers at the next
// plan; the same number of outcomes with one request of another chunk in
// place of one of this chunk's is refused.
func TestPagedWholeSuccessReadsNoPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t)
	k := func(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) }
	c := planKeyed(t, db, "j", [][]byte{k(0), k(1), k(2)})
	outs := func(ords ...int64) []sluice.Outcome {
		var os []sluice.Outcome
		for _, o := range ords {
			os = append(os, sluice.Outcome{Ordinal: o, State: sluice.RequestSucceeded, Offset: 10 * o, Length: 10,
				CustomID: fmt.Sprint("j-", o), BodyKey: k(int(o))})
		}
		return os
	}
	cc := *c
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending, Outcomes: outs(0, 1, 3)}); err == nil {
		t.Fatal("outcomes naming a request not in the chunk were taken")
	}
	// Corrupt the pages: only the sums' path can still finish the chunk.
	if _, err := db.SQL().Exec(`UPDATE request_pages SET data = x'ff'`); err != nil {
		t.Fatal(err)
	}
	cc = *c
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending, Outcomes: outs(2, 0, 1)}); err != nil {
		t.Fatalf("whole success without reading the pages: %v", err)
	}
	var settled int
	var answers string
	db.SQL().QueryRow(`SELECT requests_settled, answers FROM chunks WHERE id = 1`).Scan(&settled, &answers)
	if settled != 2 || answers != `[[`+fmt.Sprint(1<<40|2)+`,20,10,"6b65792d303030303030303030303032","j-2"],[`+fmt.Sprint(1<<40)+
		`,0,10,"6b65792d303030303030303030303030","j-0"],[`+fmt.Sprint(1<<40|1)+`,10,10,"6b65792d303030303030303030303031","j-1"]]` {
		t.Errorf("settled %d, answers %s", settled, answers)
	}
	planKeyed(t, db, "next", [][]byte{k(5)})
	var n int
	var id string
	db.SQL().QueryRow(`SELECT COUNT(*), MIN(custom_id) FROM ledger WHERE chunk = 1`).Scan(&n, &id)
	if n != 3 || id != "j-0" {
		t.Errorf("ledger after the fold: %d rows, first %q", n, id)
	}
}

// TestPagedFinishRefusesLookalikes: outcomes that look like a chunk's
// requests without being them are refused, never settled on the chunk: the
// same ordinals named twice in place of others (equal sums of ordinals and
// of their squares), and, where two groups' chunks interleave, another
// chunk's requests in place of this one's (the same count and sums again).
// The chunk's own requests settle it without reading a page.
func TestPagedFinishRefusesLookalikes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	succ := func(ords ...int64) []sluice.Outcome {
		var os []sluice.Outcome
		for _, o := range ords {
			os = append(os, sluice.Outcome{Ordinal: o, State: sluice.RequestSucceeded, Length: 1, CustomID: fmt.Sprint("x", o)})
		}
		return os
	}
	settled := func(db *tracker.DB, chunk int64) int {
		var s int
		db.SQL().QueryRow(`SELECT requests_settled FROM chunks WHERE id = ?`, chunk).Scan(&s)
		return s
	}
	// One chunk of ordinals 0..6; {0,0,3,4,4,5,5} has the same count, sum
	// (21) and sum of squares (91) as {0..6}.
	db := open(t)
	c := planKeyed(t, db, "j", make([][]byte, 7))
	cc := *c
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending, Outcomes: succ(0, 0, 3, 4, 4, 5, 5)}); err == nil {
		t.Error("outcomes naming requests twice, in place of others, were taken")
	}
	if s := settled(db, 1); s != 0 {
		t.Errorf("chunk settled %d after a refused finish", s)
	}
	// Two interleaved chunks: 1 holds {1,5,6,8}, 2 holds {0,2,3,4,7};
	// {2,3,7,8} has chunk 1's count, sum (20) and sum of squares (126).
	db = open(t)
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: "k", Provider: "openai", Input: "/k", Dir: t.TempDir()})).Must(t, "BeginPlan")
	idx := map[int64]int{}
	for o := int64(0); o < 9; o++ {
		ch := int64(2)
		if o == 1 || o == 5 || o == 6 || o == 8 {
			ch = 1
		}
		check.NoErr(t, "AddRequest", p.AddRequest(&sluice.Request{Ordinal: o, Line: o + 1, CustomID: fmt.Sprint("x", o), Chunk: ch, Index: idx[ch]}))
		idx[ch]++
	}
	for _, ch := range []int64{1, 2} {
		check.NoErr(t, "AddChunk", p.AddChunk(&sluice.Chunk{ID: ch, URL: "/v1/chat/completions", Model: fmt.Sprint("m", ch), Path: fmt.Sprint("c", ch), Requests: idx[ch]}))
	}
	check.NoErr(t, "Commit", p.Commit(ctx, sluice.Fingerprint{}, 9, 0))
	cs, _ := db.Chunks(ctx, "k")
	c1 := *cs[0]
	c1.State = sluice.ChunkDone
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &c1, From: sluice.ChunkPending, Outcomes: succ(2, 3, 7, 8)}); err == nil {
		t.Error("outcomes naming another chunk's requests were taken")
	}
	if s := settled(db, 1); s != 0 {
		t.Errorf("chunk 1 settled %d after a refused finish", s)
	}
	// Its own requests are taken, from the plan's sums alone (the pages
	// are made unreadable first): a chunk between another group's
	// requests needs no page read either.
	if _, err := db.SQL().Exec(`UPDATE request_pages SET data = x'ff'`); err != nil {
		t.Fatal(err)
	}
	c1 = *cs[0]
	c1.State = sluice.ChunkDone
	check.NoErr(t, "FinishChunk", db.FinishChunk(ctx, &sluice.Finish{Chunk: &c1, From: sluice.ChunkPending, Outcomes: succ(8, 1, 6, 5)}))
	if s := settled(db, 1); s != 2 {
		t.Errorf("chunk 1 settled %d, want 2", s)
	}
}

// TestPlanRefusesOrdinalsOutOfOrder: a plan's requests come in ordinal
// order, each once (pages and chunk spans rely on it).
func TestPlanRefusesOrdinalsOutOfOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t)
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/j", Dir: t.TempDir()})).Must(t, "BeginPlan")
	defer p.Abort(ctx)
	for _, o := range []int64{0, 1, 2} {
		check.NoErr(t, "AddRequest", p.AddRequest(&sluice.Request{Ordinal: o, Line: o + 1, CustomID: fmt.Sprint("x", o), Chunk: 1}))
	}
	for _, o := range []int64{1, 2} {
		if err := p.AddRequest(&sluice.Request{Ordinal: o, Line: 9, CustomID: "y", Chunk: 1}); err == nil {
			t.Errorf("ordinal %d after 2 was recorded", o)
		}
	}
	if err := p.AddRequest(&sluice.Request{Ordinal: 5, Line: 9, CustomID: "y", Chunk: 1}); err != nil {
		t.Errorf("ordinal 5 after 2: %v", err)
	}
}
