package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/tracker"
)

// planKeyed plans job id with n requests in chunk 1 whose body keys are
// keys[i] (nil: none).
func planKeyed(t *testing.T, db *tracker.DB, id string, keys [][]byte) *sluice.Chunk {
	t.Helper()
	ctx := context.Background()
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: id, Provider: "openai", Input: "/" + id, Dir: t.TempDir(), MaxAttempts: 3})).Must(t, "BeginPlan")
	rs := make([]sluice.Request, len(keys))
	for i := range rs {
		rs[i] = sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: fmt.Sprint(id, "-", i), Chunk: 1, Index: i, BodyKey: keys[i]}
	}
	check.NoErr(t, "AddRequests", p.AddRequests(rs))
	check.NoErr(t, "AddChunk", p.AddChunk(&sluice.Chunk{ID: 1, URL: "/v1/chat/completions", Model: "m", Path: "chunks/c1", Requests: len(keys)}))
	check.NoErr(t, "Commit", p.Commit(ctx, sluice.Fingerprint{Size: 1, ModTime: time.Unix(1, 0)}, int64(len(keys)), 0))
	cs := check.Try(db.Chunks(ctx, id)).Must(t, "Chunks")
	c := cs[0]
	c.State, c.ResultsPath = sluice.ChunkDone, "results/c000001-a1.results"
	return c
}

// TestFinishChunkNamesTheRequestAtFault: the outcomes of a chunk are
// recorded in bulk; when one of them is not a pending request of the chunk
// (finished already, named twice, another job's ordinal), the finish is
// refused with ErrConflict naming the first such request in outcome order,
// and nothing of it lands.
func TestFinishChunkNamesTheRequestAtFault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t)
	const n = 200
	c := planKeyed(t, db, "j", make([][]byte, n))
	outcomes := func(bad ...sluice.Outcome) []sluice.Outcome {
		var os []sluice.Outcome
		for i := 0; i < n; i++ {
			st := sluice.RequestSucceeded
			if i%3 == 0 {
				st = sluice.RequestFailed
			}
			os = append(os, sluice.Outcome{Ordinal: int64(i), State: st})
			if i == 120 {
				os = append(os, bad...)
			}
		}
		return os
	}
	for _, tc := range []struct {
		name string
		bad  []sluice.Outcome
		want int64
	}{
		{"named twice, same state", []sluice.Outcome{{Ordinal: 7, State: sluice.RequestSucceeded}}, 7},
		{"named twice, other state", []sluice.Outcome{{Ordinal: 4, State: sluice.RequestSucceeded}}, 4},
		{"not in the job", []sluice.Outcome{{Ordinal: n + 5, State: sluice.RequestFailed}}, n + 5},
	} {
		cc := *c
		err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending, Outcomes: outcomes(tc.bad...)})
		if !errors.Is(err, tracker.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("request #%d of chunk 1 ", tc.want)) {
			t.Errorf("%s: err = %v, want a conflict naming request #%d", tc.name, err, tc.want)
		}
		st, _ := db.RequestStates(ctx, "j")
		if st[sluice.RequestPending] != n {
			t.Fatalf("%s: a refused finish changed request states: %v", tc.name, st)
		}
	}
	// A state that is not final is refused too.
	cc := *c
	err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending,
		Outcomes: outcomes(sluice.Outcome{Ordinal: n - 1, State: "bogus"})[:122]})
	if err == nil {
		t.Error("an outcome in state bogus was recorded")
	}
	// Then the right finish lands whole.
	cc = *c
	check.NoErr(t, "FinishChunk", db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending, Outcomes: outcomes()}))
	st, _ := db.RequestStates(ctx, "j")
	if st[sluice.RequestFailed] != (n+2)/3 || st[sluice.RequestSucceeded] != n-(n+2)/3 || st[sluice.RequestPending] != 0 {
		t.Errorf("states after finish: %v", st)
	}
	var wrong int
	db.SQL().QueryRow(`SELECT COUNT(*) FROM requests WHERE (id & 1023) % 3 = 0 AND state != 'failed'`).Scan(&wrong)
	if wrong != 0 {
		t.Errorf("%d requests have the other request's state", wrong)
	}
	// A second finish of the same requests conflicts on the first one.
	cc = *c
	cc.State = sluice.ChunkDone
	if _, err := db.SQL().Exec(`UPDATE chunks SET state = 'pending'`); err != nil {
		t.Fatal(err)
	}
	err = db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending, Outcomes: outcomes()[50:]})
	if !errors.Is(err, tracker.ErrConflict) || !strings.Contains(err.Error(), "request #50 of chunk 1 ") {
		t.Errorf("finishing finished requests: %v, want a conflict naming request #50", err)
	}
}

// TestLedgerFoldedAtTheNextPlan: finishing a chunk writes no ledger row;
// each success's place in its results file waits on its row until a job
// is next planned, which folds every finished chunk's answers into the
// ledger before its own lookups. Of two successes of one body key in a job
// the earlier request's is the key's answer; failures, requests without a
// key and successes without a record give none; an earlier job's answer
// stays, whether it was folded before or in the same fold.
func TestLedgerFoldedAtTheNextPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t)
	k := func(s string) []byte { return []byte(fmt.Sprintf("%-16s", s)) }
	ledger := func() string {
		t.Helper()
		rows, err := db.SQL().Query(`SELECT trim(CAST(l.key AS TEXT)), COALESCE(l.custom_id, r.custom_id), l.offset, l.length
			FROM ledger l LEFT JOIN requests r ON r.id = l.request ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var key, id string
			var off, length int64
			rows.Scan(&key, &id, &off, &length)
			got = append(got, fmt.Sprintf("%s=%s@%d+%d", key, id, off, length))
		}
		return strings.Join(got, " ")
	}
	// Job a answers keys "old" and "both".
	ca := planKeyed(t, db, "a", [][]byte{k("old"), k("both")})
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: ca, From: sluice.ChunkPending, Outcomes: []sluice.Outcome{
		{Ordinal: 0, State: sluice.RequestSucceeded, Offset: 0, Length: 10},
		{Ordinal: 1, State: sluice.RequestSucceeded, Offset: 10, Length: 4}}}); err != nil {
		t.Fatal(err)
	}
	if got := ledger(); got != "" {
		t.Errorf("ledger after finishing a chunk: %q, want nothing until the next plan", got)
	}
	// Planning job b folds a's answers; planning c then folds nothing.
	cb := planKeyed(t, db, "b", [][]byte{k("x"), k("x"), k("old"), nil, k("f"), k("x"), k("same")})
	cc := planKeyed(t, db, "c", [][]byte{k("both"), k("new"), k("same")})
	const folded = "both=a-1@10+4 old=a-0@0+10"
	if got := ledger(); got != folded {
		t.Errorf("ledger once b and c are planned: %s\nwant   %s", got, folded)
	}
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: cb, From: sluice.ChunkPending, Outcomes: []sluice.Outcome{
		{Ordinal: 4, State: sluice.RequestFailed, Offset: 0, Length: 5},
		{Ordinal: 5, State: sluice.RequestSucceeded, Offset: 5, Length: 7},
		{Ordinal: 1, State: sluice.RequestSucceeded, Offset: 12, Length: 7}, // the earlier x
		{Ordinal: 3, State: sluice.RequestSucceeded, Offset: 19, Length: 7}, // no key
		{Ordinal: 2, State: sluice.RequestSucceeded, Offset: 26, Length: 7}, // old: job a's stays
		{Ordinal: 0, State: sluice.RequestSucceeded, Offset: 33, Length: 0}, // no record: not an answer
		{Ordinal: 6, State: sluice.RequestSucceeded, Offset: 40, Length: 2},
	}}); err != nil {
		t.Fatal(err)
	}
	// c finishes after b: one fold then holds both jobs' answers; of
	// "same" b's stays (the earlier job), of "both" a's (folded before).
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: cc, From: sluice.ChunkPending, Outcomes: []sluice.Outcome{
		{Ordinal: 2, State: sluice.RequestSucceeded, Offset: 0, Length: 1},
		{Ordinal: 0, State: sluice.RequestSucceeded, Offset: 1, Length: 3},
		{Ordinal: 1, State: sluice.RequestSucceeded, Offset: 4, Length: 3}}}); err != nil {
		t.Fatal(err)
	}
	if got := ledger(); got != folded {
		t.Errorf("ledger before the next plan: %s\nwant   %s", got, folded)
	}
	planKeyed(t, db, "d", [][]byte{k("d")})
	if got, want := ledger(), "both=a-1@10+4 new=c-1@4+3 old=a-0@0+10 same=b-6@40+2 x=b-1@12+7"; got != want {
		t.Errorf("ledger: %s\nwant   %s", got, want)
	}
	var unfolded int
	check.NoErr(t, "SQL", db.SQL().QueryRow(`SELECT COUNT(*) FROM chunks WHERE answers IS NOT NULL`).Scan(&unfolded))
	if unfolded != 0 {
		t.Errorf("%d finished chunks left unfolded", unfolded)
	}
}

// TestSettledOnTheChunk: a finish whose outcomes name every request left
// in the chunk (after its moves) writes the failures on rows of their own
// and the successes on the chunk alone (requests_settled 2), yet every
// reader sees them succeeded; a finish that leaves a request of the chunk
// without an outcome writes every outcome on a row, and that request stays
// pending in its page, with no row. A chunk settled either way refuses a
// second finish.
func TestSettledOnTheChunk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		skip    int64 // an ordinal given no outcome and not moved, or -1
		settled int
		pending int64
		rows    int64 // rows of chunk 1 on disk (the plan's requests are in pages)
	}{
		{"every request named", -1, 2, 0, 2},
		{"one request without an outcome", 5, 1, 1, 2 + 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a state directory of its own
			db := open(t)
			const n = 12
			c := planKeyed(t, db, "j", make([][]byte, n))
			f := &sluice.Finish{Chunk: c, From: sluice.ChunkPending}
			// 0, 3: failed; 1, 2: moved to a new chunk; the rest succeed.
			for i := int64(0); i < n; i++ {
				switch {
				case i == tc.skip:
				case i == 0 || i == 3:
					f.Outcomes = append(f.Outcomes, sluice.Outcome{Ordinal: i, State: sluice.RequestFailed})
				case i == 1 || i == 2:
					f.Moved = append(f.Moved, sluice.Request{Ordinal: i, Chunk: sluice.NewChunkRef(0), Index: int(i - 1), Attempt: 2})
				default:
					f.Outcomes = append(f.Outcomes, sluice.Outcome{Ordinal: i, State: sluice.RequestSucceeded, Offset: i * 10, Length: 10})
				}
			}
			f.NewChunks = []*sluice.Chunk{{Attempt: 2, URL: "/v1/chat/completions", Model: "m", Path: "chunks/c2", Requests: 2, State: sluice.ChunkPending}}
			check.NoErr(t, "FinishChunk", db.FinishChunk(ctx, f))
			var settled int
			var onDisk int64
			check.NoErr(t, "SQL", db.SQL().QueryRow(`SELECT requests_settled FROM chunks WHERE id = 1`).Scan(&settled))
			check.NoErr(t, "SQL", db.SQL().QueryRow(`SELECT COUNT(*) FROM requests WHERE chunk_id = 1`).Scan(&onDisk))
			if settled != tc.settled || onDisk != tc.rows {
				t.Errorf("requests_settled %d with %d rows of chunk 1 on disk, want %d and %d", settled, onDisk, tc.settled, tc.rows)
			}
			st := check.Try(db.RequestStates(ctx, "j")).Must(t, "RequestStates")
			succ := int64(n - 4)
			if tc.skip >= 0 {
				succ--
			}
			want := map[sluice.RequestState]int64{sluice.RequestFailed: 2, sluice.RequestSucceeded: succ, sluice.RequestPending: 2 + tc.pending}
			if fmt.Sprint(st) != fmt.Sprint(want) {
				t.Errorf("states %v, want %v", st, want)
			}
			got := map[int64]sluice.RequestState{}
			if err := db.ChunkRequests(ctx, "j", 1, func(r *sluice.Request) error { got[r.Ordinal] = r.State; return nil }); err != nil {
				t.Fatal(err)
			}
			for i := int64(0); i < n; i++ {
				want := sluice.RequestSucceeded
				switch {
				case i == tc.skip:
					want = sluice.RequestPending
				case i == 0 || i == 3:
					want = sluice.RequestFailed
				case i == 1 || i == 2:
					want = "" // moved out of the chunk
				}
				if got[i] != want {
					t.Errorf("request #%d of chunk 1 reads %q, want %q", i, got[i], want)
				}
			}
			moved := 0
			db.ChunkRequests(ctx, "j", 2, func(r *sluice.Request) error {
				if r.State == sluice.RequestPending {
					moved++
				}
				return nil
			})
			if moved != 2 {
				t.Errorf("%d moved requests pending in the new chunk, want 2", moved)
			}
			// The chunk put back by hand: a second finish is refused.
			if _, err := db.SQL().Exec(`UPDATE chunks SET state = 'pending' WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			cc := *c
			err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending,
				Outcomes: []sluice.Outcome{{Ordinal: 6, State: sluice.RequestSucceeded}}})
			if !errors.Is(err, tracker.ErrConflict) || !strings.Contains(err.Error(), "request #6 of chunk 1 ") {
				t.Errorf("a second finish: %v, want a conflict naming request #6", err)
			}
			// One that names no request lands, and the requests' record stays.
			check.NoErr(t, "FinishChunk", db.FinishChunk(ctx, &sluice.Finish{Chunk: &cc, From: sluice.ChunkPending}))
			if again, _ := db.RequestStates(ctx, "j"); fmt.Sprint(again) != fmt.Sprint(want) {
				t.Errorf("states after a second finish naming nothing: %v, want %v", again, want)
			}
		})
	}
}
