package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

type statusJob struct {
	ID           string                        `json:"id"`
	Input        string                        `json:"input"`
	Provider     string                        `json:"provider"`
	State        sluice.JobState               `json:"state"`
	Output       string                        `json:"output,omitempty"`
	Requests     map[sluice.RequestState]int64 `json:"requests"`
	Chunks       map[sluice.ChunkState]int     `json:"chunks"`
	Live         []statusBatch                 `json:"live_batches"`
	InputTokens  int64                         `json:"input_tokens"`
	OutputTokens int64                         `json:"output_tokens"`
	CreatedAt    time.Time                     `json:"created_at"`
	Age          string                        `json:"age"`
	Next         string                        `json:"next_action"`
	ChunkList    []*sluice.Chunk               `json:"chunk_list,omitempty"`
}

type statusBatch struct {
	Chunk    int64     `json:"chunk"`
	Attempt  int       `json:"attempt"`
	BatchID  string    `json:"batch_id"`
	Status   string    `json:"status"`
	NextPoll time.Time `json:"next_poll_at"`
}

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON, withChunks bool
	cmd := &cobra.Command{
		Use:   "status [JOB]",
		Short: "Show jobs, their requests and chunks by state, live batches and the next action",
		Long: `status lists every job in the state directory (or one JOB) with its input,
provider, state, requests by state, chunks by state, live batches with their
provider ids and status, tokens used, age, and what sluice would do next.
--chunks lists each chunk with its last provider error verbatim.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, err := g.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			var jobs []*sluice.Job
			if len(args) == 1 {
				j, err := db.Job(ctx, args[0])
				if err != nil {
					return withCode(exitUsage, err)
				}
				jobs = []*sluice.Job{j}
			} else if jobs, err = db.Jobs(ctx); err != nil {
				return err
			}
			var out []statusJob
			for _, j := range jobs {
				s, err := jobStatus(cmd, db, j, withChunks)
				if err != nil {
					return err
				}
				out = append(out, s)
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if out == nil {
					out = []statusJob{}
				}
				return enc.Encode(map[string]any{"jobs": out})
			}
			writeStatus(os.Stdout, out, withChunks)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document {\"jobs\": [...]}")
	cmd.Flags().BoolVar(&withChunks, "chunks", false, "list every chunk with its provider ids and last error")
	return cmd
}

func jobStatus(cmd *cobra.Command, db *tracker.DB, j *sluice.Job, withChunks bool) (statusJob, error) {
	ctx := cmd.Context()
	reqs, err := db.RequestStates(ctx, j.ID)
	if err != nil {
		return statusJob{}, err
	}
	chunks, err := db.Chunks(ctx, j.ID)
	if err != nil {
		return statusJob{}, err
	}
	s := statusJob{ID: j.ID, Input: j.Input, Provider: j.Provider, State: j.State, Output: j.Output,
		Requests: reqs, Chunks: map[sluice.ChunkState]int{}, Live: []statusBatch{}, CreatedAt: j.CreatedAt,
		Age: time.Since(j.CreatedAt).Round(time.Second).String()}
	var nextPoll time.Time
	pending := 0
	for _, c := range chunks {
		s.Chunks[c.State]++
		s.InputTokens += c.InputTokens
		s.OutputTokens += c.OutputTokens
		if c.State.Live() {
			s.Live = append(s.Live, statusBatch{Chunk: c.ID, Attempt: c.Attempt, BatchID: c.BatchID, Status: c.BatchStatus, NextPoll: c.NextPollAt})
			if nextPoll.IsZero() || c.NextPollAt.Before(nextPoll) {
				nextPoll = c.NextPollAt
			}
		}
		if c.State == sluice.ChunkPending || c.State == sluice.ChunkUploaded {
			pending++
		}
	}
	if withChunks {
		s.ChunkList = chunks
	}
	switch j.State {
	case sluice.JobPlanning:
		s.Next = "re-plan from scratch (planning was interrupted)"
	case sluice.JobPlanned:
		s.Next = fmt.Sprintf("submit %d batches", pending)
	case sluice.JobDone:
		s.Next = "nothing: output written"
	case sluice.JobMerging:
		s.Next = "merge the results into the output"
	default:
		switch {
		case pending > 0 && len(s.Live) > 0:
			s.Next = fmt.Sprintf("submit %d batches; poll %d live batches (next poll %s)", pending, len(s.Live), nextPoll.Format(time.TimeOnly))
		case pending > 0:
			s.Next = fmt.Sprintf("submit %d batches", pending)
		case len(s.Live) > 0:
			s.Next = fmt.Sprintf("poll %d live batches (next poll %s)", len(s.Live), nextPoll.Format(time.TimeOnly))
		default:
			s.Next = "merge the results into the output"
		}
	}
	return s, nil
}

func writeStatus(w io.Writer, jobs []statusJob, withChunks bool) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	for i, j := range jobs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "job %s  [%s]  provider %s  age %s\n", j.ID, j.State, j.Provider, j.Age)
		fmt.Fprintf(w, "  input:    %s\n", j.Input)
		if j.Output != "" {
			fmt.Fprintf(w, "  output:   %s\n", j.Output)
		}
		fmt.Fprintf(w, "  requests: %s\n", countsLine(j.Requests))
		fmt.Fprintf(w, "  chunks:   %s\n", countsLine(j.Chunks))
		fmt.Fprintf(w, "  tokens:   %d input, %d output\n", j.InputTokens, j.OutputTokens)
		for _, b := range j.Live {
			fmt.Fprintf(w, "  live:     chunk %d attempt %d batch %s status %s\n", b.Chunk, b.Attempt, b.BatchID, b.Status)
		}
		fmt.Fprintf(w, "  next:     %s\n", j.Next)
		if withChunks {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  chunk\tattempt\tstate\tmodel\trequests\tbatch\tstatus\tlast error")
			for _, c := range j.ChunkList {
				fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", c.ID, c.Attempt, c.State, c.Model, c.Requests, c.BatchID, c.BatchStatus, c.LastError)
			}
			tw.Flush()
		}
	}
}

func countsLine[K ~string, V int | int64](m map[K]V) string {
	var keys []string
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d %s", m[K(k)], k)
	}
	if s == "" {
		return "none"
	}
	return s
}
