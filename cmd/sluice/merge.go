package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
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

// mergeJob writes the job's output from its chunks' results files and
// marks the job done. It can run again on a done job (the results files
// stay), which rewrites the same output, unless the output and errors
// files this merge would write are there untouched since the last one: a
// timer that keeps running the finished job's command then costs a stat,
// not a rewrite of the whole output.
func mergeJob(ctx context.Context, db *tracker.DB, job *sluice.Job, out, errorsOut, order string, log zerolog.Logger) (*merger.Summary, error) {
	if errorsOut == "" {
		errorsOut = errorsPathFor(out)
	}
	if order == "" {
		order = "input"
	}
	if job.State == sluice.JobDone {
		if js := previousSummary(ctx, db, job); js.current(out, errorsOut, order) {
			log.Info().Str("output", out).Str("errors", errorsOut).Msg("job done before; output unchanged since")
			return &merger.Summary{Lines: js.Lines, Succeeded: js.Succeeded, Failed: js.Failed, Rejected: js.Rejected,
				OutputBytes: js.OutputBytes, Output: js.Output, Errors: js.Errors}, nil
		}
	}
	chunks, err := db.Chunks(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, c := range chunks {
		if !c.State.Terminal() {
			return nil, fmt.Errorf("job %s: chunk %d is still %s; cannot merge yet", job.ID, c.ID, c.State)
		}
		if c.ResultsPath != "" {
			files = append(files, filepath.Join(job.Dir, c.ResultsPath))
		}
	}
	files = append(files, reusedFiles(job)...)
	log.Info().Int("files", len(files)).Str("output", out).Msg("merging results")
	// An output in object storage is merged into the job directory, then
	// uploaded whole (objects.go).
	localOut, localErrs := localCopy(job, "out-", out), localCopy(job, "errors-", errorsOut)
	sum, err := merger.Merge(ctx, merger.Config{
		Output: localOut, ErrorsPath: localErrs, Order: order, Files: files, Total: job.Requests,
		Expected: func(yield func(int64, string) bool) error { return db.Expected(ctx, job.ID, yield) },
		TempDir:  filepath.Dir(localOut), Rejected: rejectedResults(job, log),
	})
	if err != nil {
		return nil, fmt.Errorf("merge job %s: %w", job.ID, err)
	}
	if err := uploadOutputs(ctx, [2]string{localOut, out}, [2]string{localErrs, errorsOut}); err != nil {
		return nil, err
	}
	sum.Output, sum.Errors = out, errorsOut
	js := summarize(ctx, db, job, chunks, sum)
	js.Cancelled, js.Order = !job.CancelRequestedAt.IsZero(), order
	if st, err := os.Stat(sum.Output); err == nil {
		js.OutputBytes, js.OutputMTime = st.Size(), st.ModTime()
	}
	if st, err := os.Stat(sum.Errors); err == nil {
		js.ErrorsBytes = st.Size()
	}
	if job.State == sluice.JobMerging {
		// Done and its summary in one transaction: a done job always has one.
		if err := db.FinishJob(ctx, job.ID, &js.JobSummary); err != nil {
			return nil, err
		}
		job.State = sluice.JobDone
	} else if err := db.SetSummary(ctx, job.ID, &js.JobSummary); err != nil {
		log.Warn().Err(err).Msg("could not save the job summary (status will not show it)")
	}
	log.Info().Int64("lines", sum.Lines).Int64("succeeded", sum.Succeeded).Int64("failed", sum.Failed).
		Int64("retried", js.Retried).Str("output", sum.Output).Str("errors", sum.Errors).Msg("job done")
	return sum, nil
}

func summarize(ctx context.Context, db *tracker.DB, job *sluice.Job, chunks []*sluice.Chunk, sum *merger.Summary) jobSummary {
	n := countChunks(chunks)
	js := jobSummary{JobSummary: sluice.JobSummary{Output: sum.Output, Errors: sum.Errors, Lines: sum.Lines,
		Succeeded: sum.Succeeded, Failed: sum.Failed, Retried: retriedRequests(ctx, db, job.ID), Batches: n.submitted,
		RetryBatches: n.retryBatches, StartedAt: job.CreatedAt, FinishedAt: time.Now()}, Rejected: sum.Rejected}
	for _, c := range chunks {
		js.InputTokens += c.InputTokens
		js.OutputTokens += c.OutputTokens
	}
	js.Wall = shortDuration(js.FinishedAt.Sub(js.StartedAt))
	js.Money = jobMoney(ctx, db, job, chunks)
	if old := previousSummary(ctx, db, job); !old.FinishedAt.IsZero() {
		// A re-run of a done job rewrites the output: the job finished then.
		js.FinishedAt, js.Wall = old.FinishedAt, old.Wall
	}
	return js
}

// retriedRequests counts the job's requests that went into a retry batch
// (-1 when the database cannot say).
func retriedRequests(ctx context.Context, db *tracker.DB, job string) int64 {
	n, err := db.RetriedRequests(ctx, job)
	if err != nil {
		return -1
	}
	return n
}

// current reports whether the output and errors files of this summary are
// the ones asked for and still as the merge left them.
func (js jobSummary) current(out, errorsOut, order string) bool {
	if js.Output != out || js.Errors != errorsOut || js.Order != order || js.OutputMTime.IsZero() {
		return false
	}
	o, err := os.Stat(out)
	if err != nil || o.Size() != js.OutputBytes || !o.ModTime().Equal(js.OutputMTime) {
		return false
	}
	e, err := os.Stat(errorsOut)
	return err == nil && e.Size() == js.ErrorsBytes
}

// previousSummary is the summary of the job's last merge, or a zero one.
func previousSummary(ctx context.Context, db *tracker.DB, job *sluice.Job) jobSummary {
	s, err := db.Summary(ctx, job.ID)
	if err != nil || s == nil {
		return jobSummary{}
	}
	js := jobSummary{JobSummary: *s, Wall: shortDuration(s.FinishedAt.Sub(s.StartedAt))}
	if _, err := os.Stat(filepath.Join(job.Dir, splitter.RejectedResults)); err == nil {
		js.Rejected = job.Rejected // merged into the output and errors files
	}
	return js
}

// printSummary is the last word of a run on stdout: counts, batches,
// tokens, wall time, and where the output and errors are.
func printSummary(w io.Writer, ctx context.Context, db *tracker.DB, job *sluice.Job, sum *merger.Summary, wall time.Duration) {
	js := previousSummary(ctx, db, job)
	if js.Output == "" {
		chunks, _ := db.Chunks(ctx, job.ID)
		js = summarize(ctx, db, job, chunks, sum)
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
	fmt.Fprintf(w, "batches: %s; tokens: %s input, %s output (provider usage); wall time %s this run, %s since planned\n",
		commas(int64(js.Batches)), commas(js.InputTokens), commas(js.OutputTokens), shortDuration(wall), js.Wall)
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
func printProgressSummary(ctx context.Context, db *tracker.DB, job *sluice.Job) {
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

// rejectedResults is the job's file of lines rejected as invalid, for the
// merge ("" when the job has none).
func rejectedResults(job *sluice.Job, log zerolog.Logger) string {
	if job.Rejected == 0 {
		return ""
	}
	p := filepath.Join(job.Dir, splitter.RejectedResults)
	if _, err := os.Stat(p); err != nil {
		// A plan made by a sluice before rejected lines were merged.
		log.Warn().Int64("rejected", job.Rejected).Msg("the rejected lines of this job are only in its rejects file (planned by an older sluice); plan again with --job NEW_NAME to have them in the output and errors files")
		return ""
	}
	return p
}

// failedAny reports whether a merge should exit 4: some request failed,
// or some input line was rejected.
func failedAny(sum *merger.Summary) bool { return sum.Failed > 0 || sum.Rejected > 0 }
