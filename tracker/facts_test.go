package tracker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/migrations"
	"github.com/sluice-batch/sluice/tracker"
)

// TestMigrationFacts: a version-3 database whose facts live in prose and in
// files beside the job (a "cancelled" marker, summary.json, a stuck
// batch's reason in last_error) is migrated to version 4: the files are
// imported into columns and rows, each last error is split into its code
// and message and kept as the chunk's first attempt error, and the stuck
// reason is a column the dispatcher reads.
func TestMigrationFacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	all := check.Try(migrations.All()).Must(t, "All")
	old := check.Try(tracker.OpenWith(ctx, dir, all[:3])).Must(t, "OpenWith")
	jobDir := t.TempDir()
	cancelled := time.Date(2026, 11, 20, 8, 30, 0, 0, time.UTC)
	check.NoErr(t, "WriteFile", os.WriteFile(filepath.Join(jobDir, "cancelled"), []byte(cancelled.Format(time.RFC3339)+"\n"), 0o600))
	// summary.json as the sluice before migration 0004 wrote it.
	summary := `{"output": "/o/out.jsonl", "errors": "/o/out.errors.jsonl", "order": "input", "output_bytes": 1234,
		"output_mtime": "2026-11-20T09:00:00Z", "errors_bytes": 56, "lines": 10, "succeeded": 7, "failed": 3,
		"retried": 2, "batches": 4, "retry_batches": 1, "input_tokens": 100, "output_tokens": 200, "cancelled": true,
		"started_at": "2026-11-20T08:00:00Z", "finished_at": "2026-11-20T09:00:00Z", "wall_time": "1h"}`
	check.NoErr(t, "WriteFile", os.WriteFile(filepath.Join(jobDir, "summary.json"), []byte(summary), 0o600))
	for _, q := range []string{
		`INSERT INTO jobs (id, provider, input, dir, state, created_at, updated_at, key) VALUES ('a', 'openai', '/in', '` + jobDir + `', 'done', 1, 1, 1)`,
		`INSERT INTO jobs (id, provider, input, dir, state, created_at, updated_at, key) VALUES ('b', 'openai', '/in', '/nowhere', 'running', 1, 1, 2)`,
		// A batch stuck, cancel requested, still polled.
		`INSERT INTO chunks (job_id, id, attempt, url, model, path, requests, bytes, state, submitted_at, last_error)
			VALUES ('b', 1, 1, '/v1/embeddings', 'm', 'c1', 3, 30, 'submitted', 5, 'batch_stuck: stuck in validating for 27h; cancel requested')`,
		// An attempt that failed for good.
		`INSERT INTO chunks (job_id, id, attempt, url, model, path, requests, bytes, state, ended_at, last_error)
			VALUES ('b', 2, 1, '/v1/embeddings', 'm', 'c2', 3, 30, 'failed', 7, 'results_unavailable: download results: HTTP 404: gone (failed on 5 polls in a row)')`,
		// A poll that failed, to be tried again: the prefix is the call, not a code.
		`INSERT INTO chunks (job_id, id, attempt, url, model, path, requests, bytes, state, submitted_at, last_error)
			VALUES ('b', 3, 2, '/v1/embeddings', 'm', 'c3', 3, 30, 'submitted', 9, 'poll: HTTP 503: busy')`,
		// Notes on the provider's output, without a code.
		`INSERT INTO chunks (job_id, id, attempt, url, model, path, requests, bytes, state, ended_at, last_error)
			VALUES ('b', 4, 1, '/v1/embeddings', 'm', 'c4', 3, 30, 'done', 11, '2 result(s) for custom_ids not in this batch ignored')`,
		`INSERT INTO chunks (job_id, id, attempt, url, model, path, requests, bytes, state) VALUES ('b', 5, 1, '/v1/embeddings', 'm', 'c5', 3, 30, 'done')`,
	} {
		if _, err := old.SQL().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close()

	db := check.Try(tracker.Open(ctx, dir)).Must(t, "Open")
	defer db.Close()
	a := check.Try(db.Job(ctx, "a")).Must(t, "Job")
	if !a.CancelRequestedAt.Equal(cancelled) {
		t.Errorf("job a cancel_requested_at = %v, want %v from its marker file", a.CancelRequestedAt, cancelled)
	}
	s := check.Try(db.Summary(ctx, "a")).Must(t, "job a summary")
	check.Fatal(t, "job a summary, want the one of summary.json", s, s != nil)
	var want sluice.JobSummary
	check.NoErr(t, "Unmarshal", json.Unmarshal([]byte(summary), &want))
	check.Error(t, fmt.Sprintf("summary times, want %v %v %v", want.OutputMTime, want.StartedAt, want.FinishedAt), []time.Time{s.OutputMTime, s.StartedAt, s.FinishedAt},
		s.OutputMTime.Equal(want.OutputMTime), s.StartedAt.Equal(want.StartedAt), s.FinishedAt.Equal(want.FinishedAt))
	s.OutputMTime, s.StartedAt, s.FinishedAt = want.OutputMTime, want.StartedAt, want.FinishedAt
	if *s != want {
		t.Errorf("summary %+v, want %+v", *s, want)
	}
	b, err := db.Job(ctx, "b")
	check.Error(t, "job b, want never cancelled", fmt.Sprint(b, err), err == nil, err == nil && b.CancelRequestedAt.IsZero())
	if s, err := db.Summary(ctx, "b"); s != nil || err != nil {
		t.Errorf("job b summary: %+v %v, want none", s, err)
	}

	chunks := check.Try(db.Chunks(ctx, "b")).Must(t, "chunks of b")
	check.Fatal(t, "chunks of b", len(chunks), len(chunks) == 5)
	for _, w := range []struct {
		code  sluice.ErrorCode
		msg   string
		stuck string
	}{
		{sluice.CodeBatchStuck, "stuck in validating for 27h; cancel requested", "stuck in validating for 27h"},
		{sluice.CodeResultsUnavailable, "download results: HTTP 404: gone (failed on 5 polls in a row)", ""},
		{sluice.CodePollFailed, "poll: HTTP 503: busy", ""},
		{"", "2 result(s) for custom_ids not in this batch ignored", ""},
		{"", "", ""},
	} {
		c := chunks[0]
		chunks = chunks[1:]
		check.Error(t, fmt.Sprintf("chunk %d: code, message, stuck; want %q %q %q", c.ID, w.code, w.msg, w.stuck), []string{string(c.ErrorCode), c.LastError, c.Stuck},
			c.ErrorCode == w.code, c.LastError == w.msg, c.Stuck == w.stuck)
	}
	errs, total, err := db.AttemptErrors(ctx, "b", 0)
	check.NoErr(t, "attempt errors of b", err)
	check.Fatal(t, "attempt errors of b: count, total; want one per chunk with a last error", []int64{int64(len(errs)), total}, total == 4, len(errs) == 4)
	e := errs[2]
	check.Error(t, "imported attempt error", e, e.Chunk == 3, e.Attempt == 2, e.Code == sluice.CodePollFailed, e.Message == "poll: HTTP 503: busy", e.At.UnixNano() == 9)

	// A job planned by this version has no marker to fall back on: its
	// cancel is only the column.
	if _, err := db.CancelJob(ctx, "b", sluice.JobPlanned); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("cancel of a running job as planned: %v, want a conflict", err)
	}
	at := check.Try(db.CancelJob(ctx, "b", sluice.JobRunning)).Must(t, "CancelJob")
	b, _ = db.Job(ctx, "b")
	check.Error(t, fmt.Sprintf("after cancel, want cancelled at %v", at), b, b.State == sluice.JobCancelled, b.CancelRequestedAt.Equal(at))
	check.NoErr(t, "DeleteJob", db.DeleteJob(ctx, "b"))
	if _, total, _ := db.AttemptErrors(ctx, "b", 0); total != 0 {
		t.Errorf("deleted job b still has %d attempt errors", total)
	}
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

// TestAttemptErrorsRecorded: each new error a chunk update carries is kept
// as a row, in the update's transaction; the same error again is not a new
// row, the same error after the chunk recovered is; an update refused by
// its state guard records nothing.
func testAttemptErrorsRecorded(t *testing.T, db *testDB) {
	ctx := context.Background()
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir()})).Must(t, "BeginPlan")
	check.NoErr(t, "AddChunk", p.AddChunk(&sluice.Chunk{Job: "j", ID: 1, Attempt: 1, URL: "/v1/embeddings", Model: "m", Path: "c1", Requests: 1, Bytes: 10, State: sluice.ChunkPending}))
	check.NoErr(t, "AddRequests", p.AddRequests([]sluice.Request{{Ordinal: 0, Line: 1, CustomID: "x", Chunk: 1}}))
	check.NoErr(t, "Commit", p.Commit(ctx, sluice.Fingerprint{}, 1, 0))
	chunks := check.Try(db.Chunks(ctx, "j")).Must(t, "Chunks")
	c := chunks[0]
	clock := time.Unix(1000, 0)
	db.SetClock(func() time.Time { clock = clock.Add(time.Second); return clock })
	update := func(from sluice.ChunkState) error { return db.UpdateChunk(ctx, c, from) }

	c.SetError(sluice.CodeUploadFailed, "upload: HTTP 503: busy")
	check.NoErr(t, "update", update(sluice.ChunkPending))
	if err := update(sluice.ChunkPending); err != nil { // the same error again
		t.Fatal(err)
	}
	c.ClearError()
	check.NoErr(t, "update", update(sluice.ChunkPending))
	c.SetError(sluice.CodeUploadFailed, "upload: HTTP 503: busy") // again, after a recovery
	check.NoErr(t, "update", update(sluice.ChunkPending))
	c.SetError(sluice.CodeInvalidRequest, "never recorded")
	if err := update(sluice.ChunkSubmitted); !errors.Is(err, tracker.ErrConflict) {
		t.Fatalf("update from the wrong state: %v, want a conflict", err)
	}
	errs, total, err := db.AttemptErrors(ctx, "j", 0)
	if err != nil {
		t.Fatal(err)
	}
	if total != 2 || len(errs) != 2 {
		t.Fatalf("attempt errors: %+v (total %d), want the upload error twice", errs, total)
	}
	for i, e := range errs {
		if e.Job != "j" || e.Chunk != 1 || e.Attempt != 1 || e.Code != sluice.CodeUploadFailed || e.Message != "upload: HTTP 503: busy" {
			t.Errorf("error %d: %+v", i, e)
		}
	}
	if !errs[0].At.Before(errs[1].At) {
		t.Errorf("errors out of order: %v then %v", errs[0].At, errs[1].At)
	}
	last, total, err := db.AttemptErrors(ctx, "j", 1)
	if err != nil || total != 2 || len(last) != 1 || !last[0].At.Equal(errs[1].At) {
		t.Errorf("last error: %+v of %d, %v; want the newer one of 2", last, total, err)
	}
}

// TestFinishJobRecordsSummary: a job becomes done with its summary in one
// transaction, only from merging; a later merge replaces the summary.
func testFinishJobRecordsSummary(t *testing.T, db *testDB) {
	ctx := context.Background()
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir()})).Must(t, "BeginPlan")
	check.NoErr(t, "Commit", p.Commit(ctx, sluice.Fingerprint{}, 0, 0))
	s := &sluice.JobSummary{Output: "/o", Errors: "/e", Order: "input", Lines: 3, Succeeded: 2, Failed: 1,
		StartedAt: time.Unix(10, 0), FinishedAt: time.Unix(20, 0)}
	if err := db.FinishJob(ctx, "j", s); !errors.Is(err, tracker.ErrConflict) {
		t.Fatalf("finish a planned job: %v, want a conflict", err)
	}
	if got, _ := db.Summary(ctx, "j"); got != nil {
		t.Fatalf("a refused finish left a summary: %+v", got)
	}
	for _, st := range [][2]sluice.JobState{{sluice.JobPlanned, sluice.JobRunning}, {sluice.JobRunning, sluice.JobMerging}} {
		check.NoErr(t, "SetJobState", db.SetJobState(ctx, "j", st[0], st[1]))
	}
	check.NoErr(t, "FinishJob", db.FinishJob(ctx, "j", s))
	j, _ := db.Job(ctx, "j")
	got, err := db.Summary(ctx, "j")
	if j.State != sluice.JobDone || err != nil || got == nil || got.Lines != 3 || got.Failed != 1 || !got.FinishedAt.Equal(s.FinishedAt) {
		t.Fatalf("after finish: %s, summary %+v %v", j.State, got, err)
	}
	s.Output = "/o2"
	check.NoErr(t, "SetSummary", db.SetSummary(ctx, "j", s))
	if got, _ := db.Summary(ctx, "j"); got.Output != "/o2" {
		t.Errorf("summary after a second merge: %+v", got)
	}
}
