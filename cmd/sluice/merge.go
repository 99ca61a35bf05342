package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// jobSummary is what the last merge of a job produced (kept by the
// tracker, so that `sluice status` can show a finished job's outcome
// without reading its output), with the wall time from plan to merge.
type jobSummary struct {
	sluice.JobSummary
	Wall string `json:"wall_time"` // planned to merged, across every run
	// Rejected is the job's input lines rejected as invalid
	// (--skip-invalid): sluice.Job.Rejected, in the errors file.
	Rejected int64 `json:"rejected,omitempty"`
	// Money is the job's spend, estimate vs usage and reuse (computed when
	// shown, from the tracker and the prices in force; docs/money.md).
	Money *spendJSON `json:"money,omitempty"`
}

// previousSummary is the summary of the job's last merge, or a zero one,
// for printing (lifecycle.LastSummary).
func previousSummary(ctx context.Context, db tracker.Backend, job *sluice.Job) jobSummary {
	return printable(lifecycle.LastSummary(ctx, db, job))
}

// printable is a lifecycle summary with its wall time.
func printable(s lifecycle.Summary) jobSummary {
	js := jobSummary{JobSummary: s.JobSummary, Rejected: s.Rejected}
	if !s.FinishedAt.IsZero() {
		js.Wall = shortDuration(s.FinishedAt.Sub(s.StartedAt))
	}
	return js
}

// runWall is the wall time of a run and, within it, of deleting the job's
// files at the provider after the merge (which "since planned", plan to
// merge, does not hold).
type runWall struct{ total, cleanup time.Duration }

func (r runWall) String() string {
	s := shortDuration(r.total) + " this run"
	if r.cleanup >= time.Second {
		s += " (" + shortDuration(r.cleanup) + " of it deleting the job's files at the provider)"
	}
	return s
}

// printSummary is the last word of a run on stdout: counts, batches,
// tokens, wall time, and where the output and errors are.
func printSummary(w io.Writer, ctx context.Context, db tracker.Backend, job *sluice.Job, sum *merger.Summary, wall runWall) {
	js := previousSummary(ctx, db, job)
	if js.Output == "" {
		chunks, _ := db.Chunks(ctx, job.ID)
		js = printable(lifecycle.Summarize(ctx, db, job, chunks, sum))
	}
	verb := "done"
	if js.Cancelled {
		verb = "cancelled"
	}
	if sum.Rejected > 0 {
		// Every input line is counted: requests, and lines rejected as
		// invalid (some of which had no custom_id to put in the output).
		fmt.Fprintf(w, "job %s %s: %s input lines: %s succeeded, %s failed, %s rejected as invalid (%s)", job.ID, verb,
			commas(sum.Succeeded+sum.Failed+sum.Rejected), commas(sum.Succeeded), commas(sum.Failed), commas(sum.Rejected), sluiceRejectedCode)
	} else {
		fmt.Fprintf(w, "job %s %s: %s: %s succeeded, %s failed", job.ID, verb, plural(sum.Lines, "request", "requests"), commas(sum.Succeeded), commas(sum.Failed))
	}
	if js.Retried > 0 {
		fmt.Fprintf(w, " (%s retried in %s)", commas(js.Retried), plural(int64(js.RetryBatches), "retry batch", "retry batches"))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "batches: %s; tokens: %s input, %s output (provider usage); wall time %s, %s since planned\n",
		commas(int64(js.Batches)), commas(js.InputTokens), commas(js.OutputTokens), wall, js.Wall)
	if js.Money == nil {
		chunks, _ := db.Chunks(ctx, job.ID)
		js.Money = jobMoney(ctx, db, job, chunks)
	}
	writeMoney(w, js.Money, func(l string) string { return l + ": " })
	fmt.Fprintf(w, "output: %s\n", sum.Output)
	if n := sum.Failed + sum.Rejected; n > 0 {
		fmt.Fprintf(w, "errors: %s (%s)\n", sum.Errors, plural(n, "line", "lines"))
	}
}

// printProgressSummary says where a job stands when a run stops with work
// left (--once, --deadline, a signal).
func printProgressSummary(ctx context.Context, db tracker.Backend, job *sluice.Job) {
	states, err := db.RequestStates(ctx, job.ID)
	if err != nil {
		return
	}
	chunks, _ := db.Chunks(ctx, job.ID)
	n := countChunks(chunks)
	fmt.Printf("job %s: %s succeeded, %s failed, %s pending; batches: %s live, %s waiting, %s done\n", job.ID,
		commas(states[sluice.RequestSucceeded]), commas(states[sluice.RequestFailed]), commas(states[sluice.RequestPending]),
		commas(int64(n.live)), commas(int64(n.waiting)), commas(int64(n.done+n.failed)))
}

const sluiceRejectedCode = splitter.RejectedCode
