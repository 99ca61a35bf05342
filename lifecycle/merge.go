package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/splitter"
)

// MergeOptions say where and how a merge writes.
type MergeOptions struct {
	// Output is the output file; Errors the errors file (default:
	// ErrorsPathFor(Output)).
	Output, Errors string
	// Order is "input" (default) or "any".
	Order string
	Log   zerolog.Logger
	// Objects finds the objects an s3:// Output or Errors names: they are
	// merged into the job directory, then uploaded whole (objects.go).
	Objects Objects
	// Files, if set, is the store of the job's files: the merge fetches
	// the results files the job directory lacks.
	Files objstore.Store
}

// Summary is what the last merge of a job produced (kept by the tracker, so
// status can show a finished job's outcome without reading its output).
type Summary struct {
	sluice.JobSummary
	// Rejected is the job's input lines rejected as invalid
	// (--skip-invalid) that were merged into the output and errors files.
	Rejected int64
}

// Merge writes the job's output from its chunks' results files and moves a
// merging job to done, its summary recorded in the same transaction. It
// can run again on a done job (the results files stay), which rewrites the
// same output, unless the output and errors files this merge would write
// are there untouched since the last one: a timer that keeps running the
// finished job's command then costs a stat, not a rewrite of the whole
// output.
func Merge(ctx context.Context, db Store, job *sluice.Job, o MergeOptions) (*merger.Summary, error) {
	log, out, errorsOut, order := o.Log, o.Output, o.Errors, o.Order
	if errorsOut == "" {
		errorsOut = ErrorsPathFor(out)
	}
	if order == "" {
		order = "input"
	}
	if job.State == sluice.JobDone {
		if js := LastSummary(ctx, db, job); js.current(ctx, o.Objects, out, errorsOut, order) {
			log.Info().Str("output", out).Str("errors", errorsOut).Msg("job done before; output unchanged since")
			return &merger.Summary{Lines: js.Lines, Succeeded: js.Succeeded, Failed: js.Failed, Rejected: js.Rejected,
				OutputBytes: js.OutputBytes, Output: js.Output, Errors: js.Errors}, nil
		}
	}
	chunks, err := db.Chunks(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	if err := newJobFiles(o.Files, job).fetchForMerge(ctx); err != nil {
		return nil, err
	}
	// What the run's dispatcher left on the heap is garbage now: collected
	// and given back to the system before the merge allocates its indexes
	// and windows, so that they do not pile on top of it (the merge's own
	// peak is about 135 MB of heap at 1,000,000 requests).
	debug.FreeOSMemory()
	var files []string
	for _, c := range chunks {
		if !c.State.Terminal() {
			return nil, fmt.Errorf("job %s: chunk %d is still %s; cannot merge yet", job.ID, c.ID, c.State)
		}
		if c.ResultsPath != "" {
			files = append(files, filepath.Join(job.Dir, c.ResultsPath))
		}
	}
	files = append(files, ReusedFiles(job)...)
	log.Info().Int("files", len(files)).Str("output", out).Msg("merging results")
	// An output in object storage is merged into the job directory, then
	// uploaded whole (objects.go).
	localOut, err := localCopy(job, "out-", out)
	if err != nil {
		return nil, err
	}
	localErrs, err := localCopy(job, "errors-", errorsOut)
	if err != nil {
		return nil, err
	}
	sum, err := merger.Merge(ctx, merger.Config{
		Output: localOut, ErrorsPath: localErrs, Order: order, Files: files, Total: job.Requests,
		Expected: func(yield func(int64, string) bool) error { return db.Expected(ctx, job.ID, yield) },
		TempDir:  filepath.Dir(localOut), Rejected: rejectedResults(job, log),
	})
	if err != nil {
		return nil, fmt.Errorf("merge job %s: %w", job.ID, err)
	}
	if err := uploadOutputs(ctx, o.Objects, [2]string{localOut, out}, [2]string{localErrs, errorsOut}); err != nil {
		return nil, err
	}
	sum.Output, sum.Errors = out, errorsOut
	js := Summarize(ctx, db, job, chunks, sum)
	js.Cancelled, js.Order = !job.CancelRequestedAt.IsZero(), order
	if size, mtime, err := statOutput(ctx, o.Objects, sum.Output); err == nil {
		js.OutputBytes, js.OutputMTime = size, mtime
	}
	if size, _, err := statOutput(ctx, o.Objects, sum.Errors); err == nil {
		js.ErrorsBytes = size
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

// Summarize is the summary of a merge of job that produced sum.
func Summarize(ctx context.Context, db Store, job *sluice.Job, chunks []*sluice.Chunk, sum *merger.Summary) Summary {
	batches, retryBatches := 0, 0
	for _, c := range chunks {
		if c.BatchID != "" {
			batches++
		}
		if c.Attempt-c.Splits > 1 { // a split spends no attempt
			retryBatches++
		}
	}
	js := Summary{JobSummary: sluice.JobSummary{Output: sum.Output, Errors: sum.Errors, Lines: sum.Lines,
		Succeeded: sum.Succeeded, Failed: sum.Failed, Retried: RetriedRequests(ctx, db, job.ID), Batches: batches,
		RetryBatches: retryBatches, StartedAt: job.CreatedAt, FinishedAt: time.Now()}, Rejected: sum.Rejected}
	for _, c := range chunks {
		js.InputTokens += c.InputTokens
		js.OutputTokens += c.OutputTokens
	}
	if old := LastSummary(ctx, db, job); !old.FinishedAt.IsZero() {
		// A re-run of a done job rewrites the output: the job finished then.
		js.FinishedAt = old.FinishedAt
	}
	return js
}

// RetriedRequests counts the job's requests that went into a retry batch
// (-1 when the database cannot say).
func RetriedRequests(ctx context.Context, db Store, job string) int64 {
	n, err := db.RetriedRequests(ctx, job)
	if err != nil {
		return -1
	}
	return n
}

// Current reports whether the output and errors files of this summary are
// the ones asked for and still as the merge left them.
func (js Summary) Current(out, errorsOut, order string) bool {
	return js.current(context.Background(), nil, out, errorsOut, order)
}

// current is Current for outputs that may be objects (found through
// objects): an object's size and LastModified tell as a file's do.
func (js Summary) current(ctx context.Context, objects Objects, out, errorsOut, order string) bool {
	if js.Output != out || js.Errors != errorsOut || js.Order != order || js.OutputMTime.IsZero() {
		return false
	}
	size, mtime, err := statOutput(ctx, objects, out)
	if err != nil || size != js.OutputBytes || !mtime.Equal(js.OutputMTime) {
		return false
	}
	size, _, err = statOutput(ctx, objects, errorsOut)
	return err == nil && size == js.ErrorsBytes
}

// LastSummary is the summary of the job's last merge, or a zero one.
func LastSummary(ctx context.Context, db Store, job *sluice.Job) Summary {
	s, err := db.Summary(ctx, job.ID)
	if err != nil || s == nil {
		return Summary{}
	}
	js := Summary{JobSummary: *s}
	if _, err := os.Stat(filepath.Join(job.Dir, splitter.RejectedResults)); err == nil {
		js.Rejected = job.Rejected // merged into the output and errors files
	}
	return js
}

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

// FailedAny reports whether a merge ended with failures: some request
// failed, or some input line was rejected (the command exits 4).
func FailedAny(sum *merger.Summary) bool { return sum.Failed > 0 || sum.Rejected > 0 }

// ErrorsPathFor is the default errors file of output out: its name with
// .errors before the extension (out.jsonl.gz: out.errors.jsonl.gz).
func ErrorsPathFor(out string) string {
	if objstore.IsURL(out) { // s3://BUCKET/KEY: its key's name
		dir, base := path.Split(out)
		return dir + filepath.Base(ErrorsPathFor(string(filepath.Separator)+base))
	}
	dir, base := filepath.Split(out)
	ext := ""
	for _, e := range []string{".gz", ".zst"} {
		if strings.HasSuffix(base, e) {
			ext = e + ext
			base = strings.TrimSuffix(base, e)
		}
	}
	inner := filepath.Ext(base)
	base = strings.TrimSuffix(base, inner)
	if inner == "" {
		inner = ".jsonl"
	}
	return filepath.Join(dir, fmt.Sprintf("%s.errors%s%s", base, inner, ext))
}
