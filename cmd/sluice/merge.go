package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/tracker"
)

// mergeJob writes the job's output from its chunks' results files and
// marks the job done. It can run again on a done job (the results files
// stay), which rewrites the same output.
func mergeJob(ctx context.Context, db *tracker.DB, job *sluice.Job, out, errorsOut, order string, log zerolog.Logger) (*merger.Summary, error) {
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
	if errorsOut == "" {
		errorsOut = errorsPathFor(out)
	}
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
	log.Info().Int64("lines", sum.Lines).Int64("failed", sum.Failed).Str("output", sum.Output).Msg("job done")
	return sum, nil
}

// jobTotals adds up a job's chunks.
type jobTotals struct {
	batches, retryBatches     int
	inputTokens, outputTokens int64
	byState                   map[sluice.ChunkState]int
}

func totals(chunks []*sluice.Chunk) jobTotals {
	t := jobTotals{byState: map[sluice.ChunkState]int{}}
	for _, c := range chunks {
		t.byState[c.State]++
		if c.BatchID != "" || c.State.Terminal() && c.ResultsPath != "" && c.State == sluice.ChunkDone {
			t.batches++
		}
		if c.Attempt > 1 {
			t.retryBatches++
		}
		t.inputTokens += c.InputTokens
		t.outputTokens += c.OutputTokens
	}
	return t
}

func printSummary(w io.Writer, ctx context.Context, db *tracker.DB, job *sluice.Job, sum *merger.Summary, wall time.Duration) {
	chunks, _ := db.Chunks(ctx, job.ID)
	t := totals(chunks)
	retried := int64(0)
	for _, c := range chunks {
		if c.Attempt > 1 {
			retried += int64(c.Requests)
		}
	}
	fmt.Fprintf(w, "job %s: %d requests: %d succeeded, %d failed, %d retried in %d retry batches\n",
		job.ID, sum.Lines, sum.Succeeded, sum.Failed, retried, t.retryBatches)
	fmt.Fprintf(w, "batches: %d; tokens: %d input, %d output (provider usage); wall time %s\n",
		len(chunks), t.inputTokens, t.outputTokens, wall.Round(time.Millisecond))
	fmt.Fprintf(w, "output: %s\n", sum.Output)
	if sum.Failed > 0 {
		fmt.Fprintf(w, "errors: %s\n", sum.Errors)
	}
}

func printProgressSummary(ctx context.Context, db *tracker.DB, job *sluice.Job) {
	states, err := db.RequestStates(ctx, job.ID)
	if err != nil {
		return
	}
	chunks, _ := db.Chunks(ctx, job.ID)
	t := totals(chunks)
	fmt.Printf("job %s: %d succeeded, %d failed, %d pending; batches: %d live, %d waiting, %d done\n", job.ID,
		states[sluice.RequestSucceeded], states[sluice.RequestFailed], states[sluice.RequestPending],
		t.byState[sluice.ChunkSubmitted]+t.byState[sluice.ChunkCreating]+t.byState[sluice.ChunkUploading]+t.byState[sluice.ChunkUploaded],
		t.byState[sluice.ChunkPending], t.byState[sluice.ChunkDone]+t.byState[sluice.ChunkFailed])
}
