package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/tracker"
)

type statusDoc struct {
	StateDir string `json:"state_dir"`
	// Database names the PostgreSQL tracker (--db), password redacted;
	// empty for SQLite in the state directory.
	Database string      `json:"database,omitempty"`
	Jobs     []statusJob `json:"jobs"`
}

type statusJob struct {
	ID           string                        `json:"id"`
	Input        string                        `json:"input"`
	Provider     string                        `json:"provider"`
	State        sluice.JobState               `json:"state"`
	Output       string                        `json:"output,omitempty"`
	Errors       string                        `json:"errors,omitempty"`
	Requests     map[sluice.RequestState]int64 `json:"requests"`
	Total        int64                         `json:"total_requests"`
	Rejected     int64                         `json:"rejected,omitempty"`
	Chunks       map[sluice.ChunkState]int     `json:"chunks"`
	Live         []statusBatch                 `json:"live_batches"`
	EstTokens    int64                         `json:"est_input_tokens"`
	InputTokens  int64                         `json:"input_tokens"`
	OutputTokens int64                         `json:"output_tokens"`
	CreatedAt    time.Time                     `json:"created_at"`
	UpdatedAt    time.Time                     `json:"updated_at"`
	Age          string                        `json:"age"`
	RunningPID   int                           `json:"running_pid,omitempty"`
	Next         string                        `json:"next_action"`
	Summary      *jobSummary                   `json:"summary,omitempty"`
	ChunkList    []*sluice.Chunk               `json:"chunk_list,omitempty"`
	Money        *spendJSON                    `json:"money"`
	// CancelRequestedAt is when `sluice cancel` cancelled the job.
	CancelRequestedAt time.Time `json:"cancel_requested_at,omitzero"`
	// AttemptErrors are the errors recorded for the job's chunk attempts,
	// oldest first: the last maxAttemptErrors, or every one with --chunks;
	// AttemptErrorsTotal counts them all.
	AttemptErrors      []sluice.AttemptError `json:"attempt_errors"`
	AttemptErrorsTotal int64                 `json:"attempt_errors_total"`
	// Workers are the processes driving the job now (docs/scale-out.md,
	// "Many workers"), oldest first; one whose heartbeat is older than
	// its lease time to live was killed and left its row behind.
	Workers []statusWorker `json:"workers"`
	// Expiring counts the live batches whose results, not yet fetched, may
	// expire at the provider within expiryWarning (docs/providers.md,
	// "Results expire"); absent when none.
	Expiring *statusExpiring `json:"results_expiring,omitempty"`
}

// statusExpiring is status's warning of results about to expire.
type statusExpiring struct {
	Batches  int       `json:"batches"`
	Requests int64     `json:"requests"`
	FirstAt  time.Time `json:"first_at"`
	Chunks   []int64   `json:"chunks"`
}

// expiryWarning is how far ahead status warns of results expiring.
const expiryWarning = 24 * time.Hour

type statusWorker struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Started   time.Time `json:"started_at"`
	Heartbeat time.Time `json:"heartbeat_at"`
	Leases    int       `json:"leases"`
}

// maxAttemptErrors bounds the attempt errors shown per job without --chunks.
const maxAttemptErrors = 20

type statusBatch struct {
	Chunk    int64     `json:"chunk"`
	Attempt  int       `json:"attempt"`
	Model    string    `json:"model"`
	Requests int       `json:"requests"`
	FileID   string    `json:"file_id,omitempty"`
	BatchID  string    `json:"batch_id"`
	Status   string    `json:"status"`
	Since    time.Time `json:"submitted_at"`
	NextPoll time.Time `json:"next_poll_at"`
	// ResultsExpireAt is the earliest the provider may delete the batch's
	// results (Chunk.ResultsExpireAt); absent when unknown.
	ResultsExpireAt time.Time `json:"results_expire_at,omitzero"`
}

func newStatusCmd(g *globalFlags) *cobra.Command {
	var asJSON, withChunks bool
	var pricesFile string
	cmd := &cobra.Command{
		Use:   "status [JOB]",
		Short: "Show jobs, their requests and chunks by state, live batches and the next action",
		Long: `status lists every job in the state directory (or one JOB) with its input,
provider, state, requests by state, chunks by state, live batches with their
provider ids and status, tokens used, spend (priced usage, what live
batches commit at most, the --max-cost cap; docs/money.md), requests reused
from earlier jobs, age, whether a sluice process is driving it now, and
what the next run would do, and the workers driving it (host, pid, last
heartbeat, leases held; docs/scale-out.md). A finished job shows its
output and errors files and its outcome: succeeded, failed, retried, and the
wall time from plan to merge.

Every error met on a job's batches is kept with its code (docs/contract.md),
chunk, attempt and time: status counts them and shows the last one.

--chunks lists each chunk with its provider ids and its last error verbatim,
then every recorded error, oldest first. --json prints {"state_dir": DIR,
"jobs": [...]} for scripts; each job's "attempt_errors" holds its last 20
errors (every one with --chunks) and "attempt_errors_total" counts them.

status only reads: it never creates a state directory, and never takes a
job's lock, so it is safe to run while cron drives the job.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			tbl, err := pricing.Load(pricesFile)
			if err != nil {
				return withCode(exitUsage, err)
			}
			activePrices = tbl
			dir, err := g.stateDir()
			if err != nil {
				return err
			}
			doc := statusDoc{StateDir: dir, Jobs: []statusJob{}}
			dsn := g.dbURL()
			if _, err := os.Stat(filepath.Join(dir, "sluice.db")); dsn == "" && errors.Is(err, os.ErrNotExist) {
				// Nothing was ever run with this state directory.
				if len(args) == 1 {
					return usageErr("job %s: not found (no jobs in %s)", args[0], dir)
				}
				return printStatus(doc, asJSON, withChunks)
			}
			db, err := openTracker(ctx, dsn, dir)
			if err != nil {
				return err
			}
			defer db.Close()
			if dsn != "" {
				doc.Database = db.Describe() // its password redacted
			}
			var jobs []*sluice.Job
			if len(args) == 1 {
				j, err := db.Job(ctx, args[0])
				if errors.Is(err, tracker.ErrNotFound) {
					return usageErr("job %s: not found in %s (sluice status lists the jobs)", args[0], dir)
				} else if err != nil {
					return err
				}
				jobs = []*sluice.Job{j}
			} else if jobs, err = db.Jobs(ctx); err != nil {
				return err
			}
			for _, j := range jobs {
				s, err := jobStatus(cmd, db, j, withChunks)
				if err != nil {
					return err
				}
				doc.Jobs = append(doc.Jobs, s)
			}
			return printStatus(doc, asJSON, withChunks)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document {\"state_dir\": DIR, \"jobs\": [...]}")
	cmd.Flags().BoolVar(&withChunks, "chunks", false, "list every chunk with its provider ids and last error")
	cmd.Flags().StringVar(&pricesFile, "prices", "", "JSON or YAML file of batch prices that overrides or extends the built-in table, for the spend shown (docs/money.md)")
	return cmd
}

func printStatus(doc statusDoc, asJSON, withChunks bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	writeStatus(os.Stdout, doc, withChunks)
	return nil
}

func jobStatus(cmd *cobra.Command, db tracker.Backend, j *sluice.Job, withChunks bool) (statusJob, error) {
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
		Requests: reqs, Total: j.Requests, Rejected: j.Rejected, Chunks: map[sluice.ChunkState]int{},
		Live: []statusBatch{}, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
		Age: shortDuration(time.Since(j.CreatedAt)), RunningPID: lifecycle.LockHolder(ctx, db, j.ID)}
	if j.Output != "" {
		s.Errors = errorsPathFor(j.Output)
	}
	for _, c := range chunks {
		s.Chunks[c.State]++
		s.InputTokens += c.InputTokens
		s.OutputTokens += c.OutputTokens
		if c.Attempt == 1 {
			s.EstTokens += c.EstTokens
		}
		if c.State == sluice.ChunkSubmitted {
			s.Live = append(s.Live, statusBatch{Chunk: c.ID, Attempt: c.Attempt, Model: c.Model, Requests: c.Requests,
				FileID: c.FileID, BatchID: c.BatchID, Status: c.BatchStatus, Since: c.SubmittedAt, NextPoll: c.NextPollAt,
				ResultsExpireAt: c.ResultsExpireAt})
			s.noteExpiry(c)
		}
	}
	if withChunks {
		s.ChunkList = chunks
	}
	s.CancelRequestedAt = j.CancelRequestedAt
	limit := maxAttemptErrors
	if withChunks {
		limit = 0
	}
	if s.AttemptErrors, s.AttemptErrorsTotal, err = db.AttemptErrors(ctx, j.ID, limit); err != nil {
		return statusJob{}, err
	}
	if s.AttemptErrors == nil {
		s.AttemptErrors = []sluice.AttemptError{}
	}
	if js := previousSummary(ctx, db, j); js.Output != "" {
		s.Summary = &js
		s.Errors = js.Errors
	} else if j.State == sluice.JobDone {
		// Merged by a sluice that kept no summary: rebuild it from the tracker.
		n := countChunks(chunks)
		s.Summary = &jobSummary{JobSummary: sluice.JobSummary{Output: j.Output, Errors: s.Errors, Lines: j.Requests,
			Succeeded: reqs[sluice.RequestSucceeded], Failed: reqs[sluice.RequestFailed],
			Retried: lifecycle.RetriedRequests(ctx, db, j.ID), Batches: n.submitted, RetryBatches: n.retryBatches,
			InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, StartedAt: j.CreatedAt,
			FinishedAt: j.UpdatedAt, Cancelled: !j.CancelRequestedAt.IsZero()},
			Wall: shortDuration(j.UpdatedAt.Sub(j.CreatedAt))}
	}
	s.Money = jobMoney(ctx, db, j, chunks)
	ws, err := db.Workers(ctx, j.ID)
	if err != nil {
		return statusJob{}, err
	}
	s.Workers = []statusWorker{}
	for _, w := range ws {
		s.Workers = append(s.Workers, statusWorker{ID: w.ID, Host: w.Host, PID: w.PID, Started: w.Started,
			Heartbeat: w.Heartbeat, Leases: w.Leases})
	}
	s.Next = lifecycle.NextAction(j, chunks)
	if s.RunningPID > 0 && j.State != sluice.JobDone {
		s.Next += fmt.Sprintf(" (sluice pid %d is on it now)", s.RunningPID)
	}
	return s, nil
}

// noteExpiry counts the live chunk c in s.Expiring when its results may
// expire within expiryWarning.
func (s *statusJob) noteExpiry(c *sluice.Chunk) {
	at := c.ResultsExpireAt
	if at.IsZero() || time.Until(at) > expiryWarning {
		return
	}
	if s.Expiring == nil {
		s.Expiring = &statusExpiring{FirstAt: at}
	}
	e := s.Expiring
	e.Batches++
	e.Requests += int64(c.Requests)
	e.Chunks = append(e.Chunks, c.ID)
	if at.Before(e.FirstAt) {
		e.FirstAt = at
	}
}

// writeExpiring prints the warning of results about to expire.
func writeExpiring(w io.Writer, j statusJob) {
	e := j.Expiring
	if e == nil {
		return
	}
	when := "by now"
	if d := time.Until(e.FirstAt); d > 0 {
		when = "in " + shortDuration(d)
	}
	fmt.Fprintf(w, "  expiry:   WARNING: results of %s (%s) not fetched yet may expire at the provider within a day, the first %s (%s): run `sluice run` on this job now to fetch them, soonest-expiring first\n",
		plural(int64(e.Batches), "batch", "batches"), plural(e.Requests, "request", "requests"), when,
		e.FirstAt.Local().Format("2006-01-02 15:04:05"))
}

// maxLiveLines bounds the live batches listed per job without --chunks.
const maxLiveLines = 10

func writeStatus(w io.Writer, doc statusDoc, withChunks bool) {
	if len(doc.Jobs) == 0 {
		if doc.Database != "" {
			fmt.Fprintf(w, "no jobs in %s\n", doc.Database)
			return
		}
		fmt.Fprintf(w, "no jobs in %s\n", doc.StateDir)
		return
	}
	for i, j := range doc.Jobs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "job %s  [%s]  provider %s  age %s\n", j.ID, j.State, j.Provider, j.Age)
		fmt.Fprintf(w, "  input:    %s\n", j.Input)
		if j.Output != "" {
			fmt.Fprintf(w, "  output:   %s\n", j.Output)
		}
		if j.Summary != nil && (j.Summary.Failed > 0 || j.Summary.Rejected > 0) {
			fmt.Fprintf(w, "  errors:   %s\n", j.Errors)
		}
		fmt.Fprintf(w, "  requests: %s; %s in all", countsLine(j.Requests, requestOrder), commas(j.Total))
		if j.Rejected > 0 {
			fmt.Fprintf(w, " (and %s rejected as invalid, in the errors file)", plural(j.Rejected, "input line", "input lines"))
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  chunks:   %s\n", countsLine(j.Chunks, chunkOrder))
		fmt.Fprintf(w, "  tokens:   %s input, %s output used (planned ~%s input)\n", commas(j.InputTokens), commas(j.OutputTokens), commas(j.EstTokens))
		writeMoney(w, j.Money, func(l string) string { return fmt.Sprintf("  %-10s", l+":") })
		if s := j.Summary; s != nil && j.State == sluice.JobDone {
			verb := "merged"
			if s.Cancelled {
				verb = "cancelled, merged"
			}
			retried := "none retried"
			if s.Retried > 0 {
				retried = fmt.Sprintf("%s retried in %s", commas(s.Retried), plural(int64(s.RetryBatches), "retry batch", "retry batches"))
			}
			failed := commas(s.Failed) + " failed"
			if s.Rejected > 0 {
				failed += ", " + commas(s.Rejected) + " rejected as invalid"
			}
			fmt.Fprintf(w, "  result:   %s succeeded, %s, %s; %s %s, wall time %s since planned\n",
				commas(s.Succeeded), failed, retried, verb, s.FinishedAt.Local().Format("2006-01-02 15:04:05"), s.Wall)
		}
		for i, b := range j.Live {
			if i == maxLiveLines && !withChunks {
				fmt.Fprintf(w, "  live:     ... and %d more (sluice status %s --chunks lists every chunk)\n", len(j.Live)-i, j.ID)
				break
			}
			fmt.Fprintf(w, "  live:     chunk %d (attempt %d, %s, %s) batch %s status %s, submitted %s ago\n",
				b.Chunk, b.Attempt, b.Model, plural(int64(b.Requests), "request", "requests"), b.BatchID, orDash(b.Status), shortDuration(time.Since(b.Since)))
		}
		writeExpiring(w, j)
		for _, wk := range j.Workers {
			fmt.Fprintf(w, "  worker:   %s pid %d, last heartbeat %s ago, %s held (up %s)\n", wk.Host, wk.PID,
				shortDuration(time.Since(wk.Heartbeat)), plural(int64(wk.Leases), "lease", "leases"), shortDuration(time.Since(wk.Started)))
		}
		fmt.Fprintf(w, "  next:     %s\n", j.Next)
		if withChunks {
			writeChunks(w, j.ChunkList)
			writeAttemptErrors(w, j.AttemptErrors)
		} else if j.AttemptErrorsTotal > 0 {
			last := j.AttemptErrors[len(j.AttemptErrors)-1]
			fmt.Fprintf(w, "  issues:   %s errors recorded for its batches (--chunks lists them); last: chunk %d attempt %d: %s: %s\n",
				commas(j.AttemptErrorsTotal), last.Chunk, last.Attempt, last.Code, oneLine(last.Message))
		}
	}
}

// writeChunks prints the chunk table. The last error is printed verbatim:
// in the table when it is one line, below it when it has tabs or newlines
// that would break the columns.
func writeChunks(w io.Writer, chunks []*sluice.Chunk) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  chunk\tattempt\tstate\tmodel\trequests\tfile\tbatch\tstatus\tlast error")
	var long []*sluice.Chunk
	for _, c := range chunks {
		e := c.ErrorText()
		if strings.ContainsAny(e, "\t\n\r") {
			long = append(long, c)
			e = "(below)"
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", c.ID, c.Attempt, c.State, c.Model, c.Requests,
			orDash(c.FileID), orDash(c.BatchID), orDash(c.BatchStatus), e)
	}
	tw.Flush()
	for _, c := range long {
		fmt.Fprintf(w, "  chunk %d last error:\n%s\n", c.ID, c.ErrorText())
	}
}

// writeAttemptErrors prints every error recorded for the job's chunk
// attempts, oldest first, each message verbatim.
func writeAttemptErrors(w io.Writer, errs []sluice.AttemptError) {
	if len(errs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  errors by attempt (oldest first):")
	for _, e := range errs {
		fmt.Fprintf(w, "  %s  chunk %d attempt %d  %s: %s\n", e.At.Local().Format("2006-01-02 15:04:05"),
			e.Chunk, e.Attempt, e.Code, e.Message)
	}
}

// oneLine cuts s at its first line break.
func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var (
	requestOrder = []sluice.RequestState{sluice.RequestSucceeded, sluice.RequestFailed, sluice.RequestPending}
	chunkOrder   = []sluice.ChunkState{sluice.ChunkPending, sluice.ChunkUploading, sluice.ChunkUploaded,
		sluice.ChunkCreating, sluice.ChunkSubmitted, sluice.ChunkDone, sluice.ChunkFailed}
)

// countsLine writes counts by state in lifecycle order, leaving out zeros
// (and listing states it does not know last).
func countsLine[K ~string, V int | int64](m map[K]V, order []K) string {
	var parts []string
	seen := map[K]bool{}
	for _, k := range order {
		seen[k] = true
		if m[k] != 0 {
			parts = append(parts, commas(int64(m[k]))+" "+string(k))
		}
	}
	var rest []string
	for k := range m {
		if !seen[k] && m[k] != 0 {
			rest = append(rest, string(k))
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		parts = append(parts, commas(int64(m[K(k)]))+" "+k)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
