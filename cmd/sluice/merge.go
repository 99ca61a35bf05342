package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/tracker"
)

// jobSummary is what the last merge of a job produced. It is kept as
// summary.json in the job's directory so that `sluice status` can show a
// finished job's outcome (counts, paths, wall time) without re-reading the
// output.
type jobSummary struct {
	Output       string     `json:"output"`
	Errors       string     `json:"errors"`
	Order        string     `json:"order"`
	OutputBytes  int64      `json:"output_bytes"`
	OutputMTime  time.Time  `json:"output_mtime"`
	ErrorsBytes  int64      `json:"errors_bytes"`
	Lines        int64      `json:"lines"`
	Succeeded    int64      `json:"succeeded"`
	Failed       int64      `json:"failed"`
	Retried      int64      `json:"retried"` // requests sent in more than one batch
	Batches      int        `json:"batches"`
	RetryBatches int        `json:"retry_batches"`
	InputTokens  int64      `json:"input_tokens"`
	OutputTokens int64      `json:"output_tokens"`
	Cancelled    bool       `json:"cancelled,omitempty"`
	StartedAt    time.Time  `json:"started_at"` // when the job was planned
	FinishedAt   time.Time  `json:"finished_at"`
	Wall         string     `json:"wall_time"` // planned to merged, across every run
	Money        *spendJSON `json:"money,omitempty"`
}

const (
	summaryFile   = "summary.json"
	cancelledFile = "cancelled" // present once 'sluice cancel' cancelled the job
)

// markCancelled records in the job's directory that the job was
// cancelled: the job state moves on to merging and done, and the summary
// still says it was cancelled.
func markCancelled(job *sluice.Job) error {
	return os.WriteFile(filepath.Join(job.Dir, cancelledFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
}

func wasCancelled(job *sluice.Job) bool {
	_, err := os.Stat(filepath.Join(job.Dir, cancelledFile))
	return err == nil
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
		if js := previousSummary(job); js.current(out, errorsOut, order) {
			log.Info().Str("output", out).Str("errors", errorsOut).Msg("job done before; output unchanged since")
			return &merger.Summary{Lines: js.Lines, Succeeded: js.Succeeded, Failed: js.Failed,
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
	sum, err := merger.Merge(ctx, merger.Config{
		Output: out, ErrorsPath: errorsOut, Order: order, Files: files, Total: job.Requests,
		Expected: func(yield func(int64, string) bool) error { return db.Expected(ctx, job.ID, yield) },
		TempDir:  filepath.Dir(out),
	})
	if err != nil {
		return nil, fmt.Errorf("merge job %s: %w", job.ID, err)
	}
	if job.State == sluice.JobMerging {
		if err := db.SetJobState(ctx, job.ID, sluice.JobMerging, sluice.JobDone); err != nil {
			return nil, err
		}
		job.State = sluice.JobDone
	}
	js := summarize(ctx, db, job, chunks, sum)
	js.Cancelled, js.Order = wasCancelled(job), order
	if st, err := os.Stat(sum.Output); err == nil {
		js.OutputBytes, js.OutputMTime = st.Size(), st.ModTime()
	}
	if st, err := os.Stat(sum.Errors); err == nil {
		js.ErrorsBytes = st.Size()
	}
	if err := writeSummary(job, js); err != nil {
		log.Warn().Err(err).Msg("could not save the job summary (status will not show it)")
	}
	log.Info().Int64("lines", sum.Lines).Int64("succeeded", sum.Succeeded).Int64("failed", sum.Failed).
		Int64("retried", js.Retried).Str("output", sum.Output).Str("errors", sum.Errors).Msg("job done")
	return sum, nil
}

func summarize(ctx context.Context, db *tracker.DB, job *sluice.Job, chunks []*sluice.Chunk, sum *merger.Summary) jobSummary {
	n := countChunks(chunks)
	js := jobSummary{Output: sum.Output, Errors: sum.Errors, Lines: sum.Lines, Succeeded: sum.Succeeded,
		Failed: sum.Failed, Retried: retriedRequests(ctx, db, job.ID), Batches: n.submitted,
		RetryBatches: n.retryBatches, StartedAt: job.CreatedAt, FinishedAt: time.Now()}
	for _, c := range chunks {
		js.InputTokens += c.InputTokens
		js.OutputTokens += c.OutputTokens
	}
	js.Wall = shortDuration(js.FinishedAt.Sub(js.StartedAt))
	js.Money = jobMoney(ctx, db, job, chunks)
	if old := previousSummary(job); !old.FinishedAt.IsZero() {
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

func writeSummary(job *sluice.Job, js jobSummary) error {
	b, err := json.MarshalIndent(js, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(job.Dir, summaryFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(job.Dir, summaryFile))
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

// previousSummary is the job's saved summary, or a zero one.
func previousSummary(job *sluice.Job) jobSummary {
	var js jobSummary
	b, err := os.ReadFile(filepath.Join(job.Dir, summaryFile))
	if err == nil {
		json.Unmarshal(b, &js)
	}
	return js
}

// printSummary is the last word of a run on stdout: counts, batches,
// tokens, wall time, and where the output and errors are.
func printSummary(w io.Writer, ctx context.Context, db *tracker.DB, job *sluice.Job, sum *merger.Summary, wall time.Duration) {
	js := previousSummary(job)
	if js.Output == "" {
		chunks, _ := db.Chunks(ctx, job.ID)
		js = summarize(ctx, db, job, chunks, sum)
	}
	verb := "done"
	if js.Cancelled {
		verb = "cancelled"
	}
	fmt.Fprintf(w, "job %s %s: %s requests: %s succeeded, %s failed", job.ID, verb, commas(sum.Lines), commas(sum.Succeeded), commas(sum.Failed))
	if js.Retried > 0 {
		fmt.Fprintf(w, " (%s retried in %s retry batches)", commas(js.Retried), commas(int64(js.RetryBatches)))
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
	if sum.Failed > 0 {
		fmt.Fprintf(w, "errors: %s (%s lines)\n", sum.Errors, commas(sum.Failed))
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
