package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/internal/wire"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/tracker"
)

// Bounds of a report: what it keeps however large the job.
const (
	// reportExamples is the most examples kept per error code.
	reportExamples = 3
	// reportCodes is the most error codes listed one by one; the rest are
	// counted under "other".
	reportCodes = 40
	// reportMessage is the most bytes of an error message shown.
	reportMessage = 400
	// reportAttemptErrors is the most batch errors read (the latest).
	reportAttemptErrors = 2000
	// reportMaxLine is the longest failure record read whole; a longer
	// one is counted without its message.
	reportMaxLine = 1 << 20
)

func newReportCmd(g *globalFlags) *cobra.Command {
	var htmlPath, pricesFile string
	cmd := &cobra.Command{
		Use:   "report JOB --html FILE",
		Short: "Write one self-contained HTML page about a job: batches on a time line, progress, spend, tokens, errors",
		Long: `report writes FILE, one HTML page to open in a browser, about JOB (its id, as
sluice status lists it): a time line of its batches (one row a batch attempt:
submitted, running, ended, failed, retried), requests done over time,
spend against the --max-cost cap, input tokens estimated against reported
per model, errors by code with a few examples each (custom_id, message,
batch), and the summary sluice status shows.

The page is self-contained: its charts are inline SVG, with no script,
style or font fetched from anywhere, so it opens offline and can be mailed.
Everything from the data (custom_ids, error messages) is escaped.

report only reads: the tracker (the SQLite database in the state directory,
or PostgreSQL with --db) and the results files of the job's batches in the
state directory, which it reads in a stream. It takes no lock, so it is
safe on a job cron is driving; a job still running shows where it stands.
FILE is replaced atomically (mode 0666 less the umask).

Exit codes: 0 written; 2 usage (no --html, a job not found); 1 other
failures (docs/contract.md).`,
		Example: `  sluice report 20260127-0310-a1b2 --html /tmp/job.html
  sluice report 20260127-0310-a1b2 --html job.html --db postgres://sluice@db/sluice`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("report takes one JOB (sluice status lists them), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if htmlPath == "" {
				return usageErr("report: --html FILE is required (where to write the page)")
			}
			tbl, err := pricing.Load(pricesFile)
			if err != nil {
				return withCode(exitUsage, err)
			}
			activePrices = tbl
			return writeReport(cmd, g, args[0], htmlPath)
		},
	}
	cmd.Flags().StringVar(&htmlPath, "html", "", "write the report to this HTML file (required; replaced atomically)")
	cmd.Flags().StringVar(&pricesFile, "prices", "", "JSON or YAML file of batch prices that overrides or extends the built-in table, for the spend shown (docs/money.md)")
	return cmd
}

func writeReport(cmd *cobra.Command, g *globalFlags, id, htmlPath string) error {
	ctx := cmd.Context()
	dir, err := g.stateDir()
	if err != nil {
		return err
	}
	dsn := g.dbURL()
	if _, err := os.Stat(filepath.Join(dir, "sluice.db")); dsn == "" && errors.Is(err, os.ErrNotExist) {
		return usageErr("job %s: not found (no jobs in %s)", id, dir)
	}
	db, err := openTracker(ctx, dsn, dir)
	if err != nil {
		return err
	}
	defer db.Close()
	j, err := db.Job(ctx, id)
	if errors.Is(err, tracker.ErrNotFound) {
		return usageErr("job %s: not found in %s (sluice status lists the jobs)", id, db.Describe())
	} else if err != nil {
		return err
	}
	rd, err := gatherReport(cmd, db, j)
	if err != nil {
		return err
	}
	if dsn != "" {
		rd.Database = db.Describe()
	}
	f, err := atomicfile.CreateMode(htmlPath, 0o666)
	if err != nil {
		return err
	}
	defer f.Abort()
	w := bufio.NewWriter(f)
	if err := renderReport(w, rd); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "report of job %s written to %s\n", j.ID, htmlPath)
	return nil
}

// reportData is everything the page shows, aggregated.
type reportData struct {
	Job       statusJob
	Database  string
	Generated time.Time
	Start     time.Time // the time axis
	End       time.Time
	Running   bool  // the job is not done: the page is a snapshot
	Reused    int64 // requests answered from earlier jobs at planning
	Chunks    []*sluice.Chunk
	Outcomes  map[int64]chunkOutcome // results per chunk, from its results file
	Spent     []spendPoint           // cumulative actual spend at each ended batch
	Models    []modelTokens
	ReqErrors []codeGroup // final request failures by code
	BatchErrs []codeGroup // errors met on batch attempts by code
	ReqFailed int64       // final request failures counted
	BatchErrN int64       // batch errors recorded in all
	Notes     []string    // what the page could not show
}

type chunkOutcome struct{ Succeeded, Failed int64 }

type spendPoint struct {
	At  time.Time
	USD float64
}

type modelTokens struct {
	Model                        string
	Planned, Estimated, Reported int64
	Output                       int64
}

// codeGroup counts one error code and keeps a few examples.
type codeGroup struct {
	Code     string
	Count    int64
	Examples []errorExample
}

type errorExample struct {
	CustomID string
	Chunk    int64
	Attempt  int
	Message  string
	At       time.Time
}

func gatherReport(cmd *cobra.Command, db tracker.Backend, j *sluice.Job) (*reportData, error) {
	ctx := cmd.Context()
	st, err := jobStatus(cmd, db, j, false)
	if err != nil {
		return nil, err
	}
	chunks, err := db.Chunks(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	rd := &reportData{Job: st, Generated: time.Now().UTC(), Chunks: chunks, Running: j.State != sluice.JobDone, Reused: j.Reused,
		Outcomes: map[int64]chunkOutcome{}}
	rd.Start, rd.End = timeAxis(j, chunks, rd.Generated, rd.Running)
	if err := rd.readResults(jobDirOf(db, j), chunks); err != nil {
		return nil, err
	}
	rd.Spent = spendOverTime(ctx, db, j, chunks)
	rd.Models = tokensByModel(chunks)
	errs, total, err := db.AttemptErrors(ctx, j.ID, reportAttemptErrors)
	if err != nil {
		return nil, err
	}
	rd.BatchErrN = total
	if total > int64(len(errs)) {
		rd.Notes = append(rd.Notes, fmt.Sprintf("batch errors: the latest %d of %d are grouped below", len(errs), total))
	}
	g := newCodeGroups()
	for _, e := range errs {
		g.add(string(e.Code), errorExample{Chunk: e.Chunk, Attempt: e.Attempt, Message: e.Message, At: e.At})
	}
	rd.BatchErrs = g.sorted()
	return rd, nil
}

// jobDirOf is where the job's chunk and results files are in this state
// directory.
func jobDirOf(db tracker.Backend, j *sluice.Job) string {
	if j.Dir != "" {
		if _, err := os.Stat(j.Dir); err == nil {
			return j.Dir
		}
	}
	return filepath.Join(db.Dir(), "jobs", j.ID)
}

// timeAxis spans the job from its plan to its end (or now, running).
func timeAxis(j *sluice.Job, chunks []*sluice.Chunk, now time.Time, running bool) (time.Time, time.Time) {
	start, end := j.CreatedAt, j.UpdatedAt
	if running {
		end = now
	}
	for _, c := range chunks {
		for _, t := range []time.Time{c.IntentAt, c.SubmittedAt, c.EndedAt} {
			if t.IsZero() {
				continue
			}
			if t.Before(start) {
				start = t
			}
			if t.After(end) {
				end = t
			}
		}
	}
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	return start, end
}

// readResults counts each chunk's final results and groups its failures
// by code, reading its results file in a stream.
func (rd *reportData) readResults(dir string, chunks []*sluice.Chunk) error {
	g := newCodeGroups()
	missing := 0
	for _, c := range chunks {
		if c.ResultsPath == "" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, c.ResultsPath))
		if errors.Is(err, os.ErrNotExist) {
			missing++
			continue
		} else if err != nil {
			return err
		}
		o, err := scanResults(f, c, g)
		f.Close()
		if err != nil {
			return fmt.Errorf("results of chunk %d: %w", c.ID, err)
		}
		rd.Outcomes[c.ID] = o
		rd.ReqFailed += o.Failed
	}
	if missing > 0 {
		rd.Notes = append(rd.Notes, fmt.Sprintf("%s not in %s (cleaned up, or on another machine): their requests are left out of the progress chart and the request errors",
			plural(int64(missing), "batch's results file is", "batches' results files are"), dir))
	}
	rd.ReqErrors = g.sorted()
	return nil
}

// scanResults reads one results file: a success is counted from its
// framing alone; a failure is read whole (up to reportMaxLine) for its
// code, message and custom_id.
func scanResults(r io.Reader, c *sluice.Chunk, g *codeGroups) (chunkOutcome, error) {
	var o chunkOutcome
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	inRecord, failure := false, false
	for {
		part, err := br.ReadSlice('\n')
		if len(part) > 0 {
			if !inRecord { // the first slice holds the framing
				inRecord, failure = true, isFailureRecord(part)
			}
			if failure && len(line) < reportMaxLine {
				line = append(line, part...)
			}
			if part[len(part)-1] == '\n' || err == io.EOF {
				if failure {
					o.Failed++
					g.addFailure(line, c)
				} else {
					o.Succeeded++
				}
				inRecord, line = false, line[:0]
			}
		}
		if err == io.EOF {
			return o, nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return o, err
		}
	}
}

func isFailureRecord(rec []byte) bool {
	i := bytes.IndexByte(rec, '\t')
	return i > 0 && len(rec) > i+1 && rec[i+1] == 'f'
}

// addFailure groups one failure record (ordinal TAB f TAB output line).
func (g *codeGroups) addFailure(rec []byte, c *sluice.Chunk) {
	_, _, line, err := wire.ParseResultRecord(rec)
	if err != nil {
		line = nil
	}
	code := gjson.GetBytes(line, "error.code").String()
	msg := gjson.GetBytes(line, "error.message").String()
	if code == "" {
		if s := gjson.GetBytes(line, "response.status_code"); s.Exists() {
			code = "http_" + strconv.FormatInt(s.Int(), 10)
			msg = gjson.GetBytes(line, "response.body.error.message").String()
		} else {
			code = "unreadable"
		}
	}
	g.add(code, errorExample{CustomID: gjson.GetBytes(line, "custom_id").String(), Chunk: c.ID, Attempt: c.Attempt,
		Message: msg, At: c.EndedAt})
}

// codeGroups counts errors by code, keeping reportExamples of each and
// reportCodes codes (the rest under "other").
type codeGroups struct{ m map[string]*codeGroup }

func newCodeGroups() *codeGroups { return &codeGroups{m: map[string]*codeGroup{}} }

func (g *codeGroups) add(code string, ex errorExample) {
	if code == "" {
		code = "(none)"
	}
	cg := g.m[code]
	if cg == nil {
		if len(g.m) >= reportCodes {
			code = "other"
			if cg = g.m[code]; cg == nil {
				cg = &codeGroup{Code: code}
				g.m[code] = cg
			}
		} else {
			cg = &codeGroup{Code: code}
			g.m[code] = cg
		}
	}
	cg.Count++
	if len(cg.Examples) < reportExamples {
		if len(ex.Message) > reportMessage {
			ex.Message = ex.Message[:reportMessage] + " ..."
		}
		cg.Examples = append(cg.Examples, ex)
	}
}

// sorted lists the codes, the most frequent first.
func (g *codeGroups) sorted() []codeGroup {
	out := make([]codeGroup, 0, len(g.m))
	for _, cg := range g.m {
		out = append(out, *cg)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Count != out[b].Count {
			return out[a].Count > out[b].Count
		}
		return out[a].Code < out[b].Code
	})
	return out
}

// spendOverTime is the job's actual spend as its batches ended, priced
// as status prices it.
func spendOverTime(ctx context.Context, db tracker.Backend, j *sluice.Job, chunks []*sluice.Chunk) []spendPoint {
	tbl := pricesInForce()
	learned, _ := db.Learned(ctx)
	price := func(m string) (pricing.Price, bool) { return tbl.Lookup(j.Provider, m) }
	ended := make([]*sluice.Chunk, 0, len(chunks))
	for _, c := range chunks {
		if !c.EndedAt.IsZero() {
			ended = append(ended, c)
		}
	}
	sort.SliceStable(ended, func(a, b int) bool { return ended[a].EndedAt.Before(ended[b].EndedAt) })
	var pts []spendPoint
	total := 0.0
	for _, c := range ended {
		s := dispatcher.SpendOf([]*sluice.Chunk{c}, price, learned)
		total += s.Actual
		pts = append(pts, spendPoint{At: c.EndedAt, USD: total})
	}
	return pts
}

// tokensByModel sums the planned estimate, the estimate of the requests
// whose usage was reported, and the usage reported, per model.
func tokensByModel(chunks []*sluice.Chunk) []modelTokens {
	m := map[string]*modelTokens{}
	var order []string
	for _, c := range chunks {
		t := m[c.Model]
		if t == nil {
			t = &modelTokens{Model: c.Model}
			m[c.Model] = t
			order = append(order, c.Model)
		}
		if c.Attempt == 1 {
			t.Planned += c.EstTokens
		}
		t.Estimated += c.UsageEstTokens
		t.Reported += c.InputTokens
		t.Output += c.OutputTokens
	}
	sort.Strings(order)
	out := make([]modelTokens, 0, len(order))
	for _, k := range order {
		out = append(out, *m[k])
	}
	return out
}
