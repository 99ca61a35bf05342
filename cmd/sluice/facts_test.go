package main

// End-to-end tests of the facts the state database keeps as data (migration
// 0004): per-attempt errors with their codes, shown by status, and old
// state directories whose facts were files beside the job.

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/sluice-batch/sluice"
)

// TestStatusJSONShowsAttemptErrors: every completed batch's output file
// answers 404 at the emulator, so each attempt fails after five fetch
// failures (the dispatcher's default bound) and the requests fail for good with results_unavailable.
// `status --json` lists every recorded error as a structured row (chunk,
// attempt, code, message, time), and `status JOB --chunks` prints them.
func TestStatusJSONShowsAttemptErrors(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	_, _, in, ids, out, env := openAIJob(t, 8, "out.jsonl", "--output-file-404-rate", "1")
	r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai", "--max-attempts", "2",
		"--poll-interval", "50ms", "--max-poll-interval", "100ms", "--rate", "-1")
	if r.code != exitFailures {
		t.Fatalf("run: exit %d, want %d\n%s", r.code, exitFailures, r.stderr)
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Error == nil || l.Error.Code != sluice.CodeResultsUnavailable || l.Error.Attempts != 2 {
			t.Errorf("%s: %+v, want %s after 2 attempts", l.CustomID, l.Error, sluice.CodeResultsUnavailable)
		}
	}

	// Without --chunks, status lists the last 20 errors and counts them all.
	job := onlyJob(t, statusOf(t, env))
	withChunks := onlyJob(t, statusOf(t, env, job.ID, "--chunks"))
	all := withChunks.AttemptErrors
	if job.AttemptErrorsTotal != int64(len(all)) || withChunks.AttemptErrorsTotal != int64(len(all)) ||
		len(job.AttemptErrors) != min(len(all), 20) {
		t.Errorf("status lists %d of %d errors, --chunks %d of %d; want the last 20 of all, and all",
			len(job.AttemptErrors), job.AttemptErrorsTotal, len(all), withChunks.AttemptErrorsTotal)
	} else if len(all) > 0 && job.AttemptErrors[len(job.AttemptErrors)-1] != all[len(all)-1] {
		t.Errorf("status's last error %+v, --chunks's %+v", job.AttemptErrors[len(job.AttemptErrors)-1], all[len(all)-1])
	}
	// Every chunk of each attempt failed five fetches in a row: the first
	// four are tried again, the fifth fails the attempt.
	perChunk := map[int64]int{}
	attempts := map[int64]int{}
	for _, e := range all {
		if e.Job != job.ID || e.At.IsZero() || e.Code != sluice.CodeResultsUnavailable || !strings.Contains(e.Message, "404") {
			t.Errorf("attempt error %+v: want the job, a time, %s and the 404", e, sluice.CodeResultsUnavailable)
		}
		perChunk[e.Chunk]++
		attempts[e.Chunk] = e.Attempt
	}
	var first, second int
	for _, c := range withChunks.ChunkList {
		if c.State != sluice.ChunkFailed || c.ErrorCode != sluice.CodeResultsUnavailable {
			t.Errorf("chunk %d: %s with last error %s %q, want failed with %s", c.ID, c.State, c.ErrorCode, c.LastError, sluice.CodeResultsUnavailable)
		}
		if perChunk[c.ID] != 5 || attempts[c.ID] != c.Attempt {
			t.Errorf("chunk %d (attempt %d): %d errors recorded for attempt %d, want 5", c.ID, c.Attempt, perChunk[c.ID], attempts[c.ID])
		}
		if c.Attempt == 1 {
			first++
		} else {
			second++
		}
	}
	if first == 0 || first != second {
		t.Errorf("%d chunks of attempt 1, %d of attempt 2; want every request retried once", first, second)
	}
	text := runSluice(t, env, "status", job.ID, "--chunks")
	if text.code != 0 {
		t.Fatalf("status --chunks: exit %d\n%s", text.code, text.stderr)
	}
	plain := runSluice(t, env, "status")
	if want := fmt.Sprintf("issues:   %d errors recorded", len(all)); plain.code != 0 || !strings.Contains(plain.stdout, want) {
		t.Errorf("status does not say %q:\n%s", want, plain.stdout)
	}
	for _, e := range all {
		if !strings.Contains(text.stdout, string(e.Code)+": "+e.Message) {
			t.Errorf("status --chunks does not list %s: %s\n%s", e.Code, e.Message, text.stdout)
		}
	}
}

// TestOldStateDirIsImported: a state directory written by the sluice
// before migration 0004 kept a finished job's summary in summary.json and
// its cancel in a "cancelled" marker file beside the job. This test makes
// one (a job run to the end, then its database taken back to schema
// version 3 and the files written as that version wrote them), and checks
// that the binary imports them: status shows the same summary and the
// cancel time, and running the job's command again finds the output
// unchanged through the imported summary instead of rewriting it.
func TestOldStateDirIsImported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 12)
	out := filepath.Join(dir, "out.jsonl")
	env := stateEnv(dir)
	if r := runSluice(t, env, "run", in, "--out", out); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	job := onlyJob(t, statusOf(t, env))
	if job.Summary == nil || job.Summary.Output != out {
		t.Fatalf("summary after the run: %+v", job.Summary)
	}
	want := *job.Summary
	before, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}

	// Back to version 3, as the old sluice left it.
	state := filepath.Join(dir, "state")
	db, err := sql.Open("sqlite3", filepath.Join(state, "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	var jobDir string
	if err := db.QueryRow(`SELECT dir FROM jobs WHERE id = ?`, job.ID).Scan(&jobDir); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE attempt_errors`, `DROP TABLE job_summaries`,
		`ALTER TABLE jobs DROP COLUMN cancel_requested_at`, `ALTER TABLE chunks DROP COLUMN error_code`,
		`ALTER TABLE chunks DROP COLUMN stuck`,
		// and what 0005_money.sql added
		`DROP TABLE ledger`, `DROP TABLE reuse_sources`, `ALTER TABLE chunks DROP COLUMN max_output_tokens`,
		`ALTER TABLE chunks DROP COLUMN no_max_requests`, `ALTER TABLE chunks DROP COLUMN usage_est_tokens`,
		`ALTER TABLE requests DROP COLUMN body_key`, `ALTER TABLE jobs DROP COLUMN reused`, `ALTER TABLE jobs DROP COLUMN max_cost`,
		// Only 0004 and 0005 are undone; 0006 stays applied.
		`DELETE FROM schema_version WHERE version IN (4, 5)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(jobDir, "summary.json"), append(b, '\n'))
	cancelled := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	writeFile(t, filepath.Join(jobDir, "cancelled"), []byte(cancelled.Format(time.RFC3339)+"\n"))

	job = onlyJob(t, statusOf(t, env))
	if job.Summary == nil || job.Summary.Output != want.Output || job.Summary.Lines != want.Lines ||
		job.Summary.Succeeded != want.Succeeded || !job.Summary.OutputMTime.Equal(want.OutputMTime) ||
		!job.Summary.FinishedAt.Equal(want.FinishedAt) || job.Summary.Wall != want.Wall {
		t.Errorf("status after the migration: summary %+v, want %+v", job.Summary, want)
	}
	if !job.CancelRequestedAt.Equal(cancelled) {
		t.Errorf("cancel_requested_at %v, want %v from the marker file", job.CancelRequestedAt, cancelled)
	}
	r := runSluice(t, env, "run", in, "--out", out)
	if r.code != 0 || !strings.Contains(r.stderr, "output unchanged since") {
		t.Errorf("run again: exit %d, want 0 and the output found unchanged\n%s", r.code, r.stderr)
	}
	if after, err := os.Stat(out); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the output was rewritten (%v): the imported summary was not used", err)
	}
}
