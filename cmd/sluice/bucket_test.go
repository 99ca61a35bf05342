package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/tracker"
)

// TestVertexBedrockBucketChangeOnResumeRefused: a Vertex or Bedrock job
// killed with batches at the provider, run again with another
// --vertex-bucket / --bedrock-bucket, is refused with exit 2 before
// anything is sent, the message naming both buckets and the ways out; no
// batch is created and no request bought twice. Run again with its own
// bucket it completes, every answer its own, nothing left in the bucket.
// (It used to resume, refuse the running batches' output as read from the
// other bucket and buy every request again.)
func TestVertexBedrockBucketChangeOnResumeRefused(t *testing.T) {
	t.Parallel()
	for _, p := range matrixProviders {
		if p.name != "vertex" && p.name != "bedrock" {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			c := newCell(t, p, 20, 4*time.Second)
			// Killed between an intent and its call, a chunk is reconciled
			// after this grace (as in TestProviderMatrix/*/sigkill).
			c.args = c.with("--reconcile-grace", "1s")
			envVar, flag := "SLUICE_VERTEX_BUCKET", "--vertex-bucket"
			if p.name == "bedrock" {
				envVar, flag = "SLUICE_BEDROCK_BUCKET", "--bedrock-bucket"
			}
			var recorded string
			for _, kv := range c.env {
				if v, ok := strings.CutPrefix(kv, envVar+"="); ok {
					recorded = v
				}
			}
			scheme, rest, _ := strings.Cut(recorded, "://")
			bucket, _, _ := strings.Cut(rest, "/")
			other := scheme + "://" + bucket + "/b2" + p.name

			l := startRun(t, c.env, c.args...)
			l.waitLog(t, "batch submitted")
			if err := l.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			l.wait(t)
			// A call the killed run had sent may still be served: its batch
			// counts before, not against the refused run.
			waitUntil(t, "the killed run's calls served", 30*time.Second, func() bool { return c.stats()["in_flight"] == 0 })
			before := c.stats()
			if before["batches_created"] == 0 {
				t.Fatalf("no batch created before the kill: %v", before)
			}

			r := runSluiceWithin(t, time.Minute, c.env, c.with(flag, other)...)
			if r.code != exitUsage {
				t.Fatalf("resumed with %s %s: exit %d, want 2\n%s", flag, other, r.code, lastBytes(r.stderr, 3000))
			}
			for _, want := range []string{flag + " " + other, flag + " " + recorded, "--job NEW_NAME", "at the provider"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, lastBytes(r.stderr, 3000))
				}
			}
			after := c.stats()
			if after["batches_created"] != before["batches_created"] {
				t.Errorf("the refused run created batches: %d, then %d", before["batches_created"], after["batches_created"])
			}
			if twice := after["requests_processed_more_than_once"]; twice != 0 {
				t.Errorf("%d requests executed more than once", twice)
			}

			// Its own bucket, given as the flag: the job goes on as planned.
			c.args = c.with(flag, recorded)
			c.finish("resumed with its own bucket after a refused other one")
			// One batch per chunk in all: every chunk ended with its
			// answers, so none was bought twice. (A chunk may be on its
			// second attempt: the kill can land between its intent and its
			// create, and the next run, finding no batch, makes one.)
			_, cs := stateChunks(t, c.state)
			if st := c.stats(); st["batches_created"] != int64(len(cs)) {
				t.Errorf("%d batches created for %d chunks: bought again", st["batches_created"], len(cs))
			}
		})
	}
}

// TestVertexBucketRecordedForOldJob: a job planned before sluice recorded
// its bucket (the column empty, as the migration leaves it) is not refused
// on its next run: the run records the bucket and completes; after that,
// another bucket is refused for it (exit 2) as for any job.
func TestVertexBucketRecordedForOldJob(t *testing.T) {
	t.Parallel() // its own emulator, state directory and bucket
	var p matrixProvider
	for _, mp := range matrixProviders {
		if mp.name == "vertex" {
			p = mp
		}
	}
	c := newCell(t, p, 10, 2*time.Second)
	c.args = c.with("--reconcile-grace", "1s")
	l := startRun(t, c.env, c.args...)
	l.waitLog(t, "batch submitted")
	if err := l.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	l.wait(t)
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(c.state, "sluice.db")+"?_busy_timeout=2000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE jobs SET bucket = ''`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	c.finish("an old job's next run")
	tdb, err := tracker.Open(context.Background(), c.state)
	if err != nil {
		t.Fatal(err)
	}
	js, err := tdb.Jobs(context.Background())
	tdb.Close()
	if err != nil || len(js) != 1 {
		t.Fatalf("jobs: %v %v", js, err)
	}
	var recorded string
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "SLUICE_VERTEX_BUCKET="); ok {
			recorded = v
		}
	}
	if js[0].Bucket != recorded {
		t.Fatalf("the job's bucket after its next run: %q, want %q", js[0].Bucket, recorded)
	}
	r := runSluiceWithin(t, time.Minute, c.env, c.with("--vertex-bucket", recorded+"-other")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--vertex-bucket "+recorded) {
		t.Fatalf("another bucket for the job once recorded: exit %d, want 2 naming %s\n%s", r.code, recorded, lastBytes(r.stderr, 3000))
	}
}
