package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
	"github.com/sluice-batch/sluice/translate"
)

// prepared is a job ready to run: planned now or found planned before.
type prepared struct {
	job     *sluice.Job
	reused  bool
	res     *splitter.Result // nil when reused
	rejects string           // where bad lines went (--skip-invalid)
	// worker is this process as a worker of the job (run; nil for plan).
	worker *worker
}

// workerOpts make openJob's caller a worker of the job (run).
type workerOpts struct {
	// join shares the job with other workers on this machine (--join):
	// the job's lock is taken shared. Without it the lock is exclusive,
	// as for a lone run.
	join bool
	ttl  time.Duration // lease time to live
	stop <-chan struct{}
}

// rejectsPath is where --skip-invalid writes the bad lines of a job in dir.
func (f *jobFlags) rejectsPath(dir string) string {
	if f.rejects != "" {
		return f.rejects
	}
	return filepath.Join(dir, "rejects.jsonl")
}

// openJob opens the state database, takes the lock of the input's job and
// finds or plans the job, with a progress line on a terminal. close
// releases the lock and the database. With wo, the process is a worker
// of the job (docs/scale-out.md, "Many workers"): it plans only while it
// holds the plan role, else waits for the plan of the worker that does.
func openJob(ctx context.Context, g *globalFlags, f *jobFlags, p provider.Preset, input string, log zerolog.Logger, wo *workerOpts) (db *tracker.DB, pr *prepared, close func(), err error) {
	db, err = g.openDB(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	id, err := f.findJobID(ctx, db, input)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	var lock *tracker.Lock
	if wo != nil && wo.join {
		lock, err = db.LockJobShared(id)
	} else {
		lock, err = db.LockJob(id)
	}
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	var wk *worker
	if wo != nil {
		if !wo.join {
			// The job's only driver on a database no other machine uses:
			// the leases a killed run left need not be waited out.
			if err := db.ForgetWorkers(ctx, id); err != nil {
				lock.Unlock()
				db.Close()
				return nil, nil, nil, err
			}
		}
		if wk, err = startWorker(ctx, db, id, wo.ttl, log); err != nil {
			lock.Unlock()
			db.Close()
			return nil, nil, nil, err
		}
	}
	close = func() {
		wk.close()
		lock.Unlock()
		db.Close()
	}
	bar := newPlanProgress(os.Stderr)
	plan := func() (*prepared, error) { return prepareJob(ctx, db, f, p, input, id, bar.update, log) }
	if wk != nil {
		pr, err = wk.planOnce(ctx, wo.stop, plan)
	} else {
		pr, err = plan()
	}
	bar.done()
	if err != nil {
		close()
		return nil, nil, nil, err
	}
	pr.worker = wk
	return db, pr, close, nil
}

// prepareJob finds the job of this input or plans it. A job interrupted
// while planning is thrown away and planned again; a job whose input
// changed since it was planned is refused. The caller holds the job lock.
func prepareJob(ctx context.Context, db *tracker.DB, f *jobFlags, p provider.Preset, input, id string,
	progress func(splitter.Progress), log zerolog.Logger) (*prepared, error) {
	st, err := os.Stat(input)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("input: %w", err))
	}
	if st.IsDir() {
		return nil, usageErr("input %s is a directory", input)
	}
	job, err := db.Job(ctx, id)
	switch {
	case errors.Is(err, tracker.ErrNotFound):
	case err != nil:
		return nil, err
	case job.State == sluice.JobPlanning:
		log.Warn().Str("job", id).Msg("found a plan interrupted mid-split; planning again from scratch")
		if err := db.DeleteJob(ctx, id); err != nil {
			return nil, err
		}
		os.RemoveAll(job.Dir)
	default:
		if err := checkUnchanged(ctx, db, job, st); err != nil {
			return nil, err
		}
		if err := f.checkSettings(ctx, db, job, p, log); err != nil {
			return nil, err
		}
		return &prepared{job: job, reused: true, rejects: f.rejectsPath(job.Dir)}, nil
	}

	dir := filepath.Join(db.Dir(), "jobs", id)
	os.RemoveAll(dir) // leftovers of an aborted plan
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	job = &sluice.Job{ID: id, Provider: p.Name, Input: input, Model: f.model, Dir: dir,
		Limits: p.Limits.Override(f.limits), MaxAttempts: f.maxAttempts, Endpoint: f.endpoint(p)}
	plan, err := db.BeginPlan(ctx, job)
	if err != nil {
		return nil, err
	}
	rejects := f.rejectsPath(dir)
	modelMap, err := provider.ParseModelMap(f.modelMap)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	warns := &chatWarnings{}
	codec := p.PlanCodec(provider.ChatOptions{ModelMap: modelMap, DefaultMaxTokens: f.maxTokens, Warn: warns.add})
	res, err := splitter.Split(ctx, splitter.Config{
		Input: input, Dir: dir, Codec: codec, Limits: job.Limits, Model: f.model,
		SkipInvalid: f.skipInvalid, RejectsPath: rejects, Progress: progress,
		KeyScope: keyScope(f, p), Reuse: f.reuse,
	}, plan)
	if err == nil {
		err = recordReuse(plan, res, log)
	}
	if err == nil {
		err = plan.Commit(ctx, res.Fingerprint, res.Requests, res.Rejected)
	}
	if err != nil {
		// Nothing half-recorded survives: the job and its files go.
		if aerr := plan.Abort(context.WithoutCancel(ctx)); aerr != nil {
			log.Error().Err(aerr).Msg("could not remove the aborted plan; the next run will")
		}
		os.RemoveAll(dir)
		var le *splitter.LineError
		if errors.As(err, &le) {
			return nil, withCode(exitUsage, err)
		}
		if strings.Contains(err.Error(), input) {
			return nil, err // it names the input already
		}
		return nil, fmt.Errorf("plan %s: %w", input, err)
	}
	warns.log(log, input, p.Name)
	return &prepared{job: job, res: res, rejects: rejects}, nil
}

// chatWarnings counts, per parameter, the chat completions lines whose
// parameter was left out in translation, so a plan warns once per
// parameter rather than once per line. The splitter's workers add to it
// at once.
type chatWarnings struct {
	mu    sync.Mutex
	by    map[string]*chatWarning
	order []string
}

type chatWarning struct {
	w     translate.Warning
	lines int64
	first int64
}

func (c *chatWarnings) add(line int64, w translate.Warning) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]*chatWarning{}
	}
	cw, ok := c.by[w.Param]
	if !ok {
		cw = &chatWarning{w: w, first: line}
		c.by[w.Param] = cw
		c.order = append(c.order, w.Param)
	}
	cw.lines++
	if line < cw.first {
		cw.first = line
	}
}

func (c *chatWarnings) log(log zerolog.Logger, input, prov string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sort.Strings(c.order)
	for _, k := range c.order {
		cw := c.by[k]
		log.Warn().Str("param", "body."+k).Int64("lines", cw.lines).Str("first", fmt.Sprintf("%s:%d", input, cw.first)).
			Str("reason", cw.w.Reason).Msg("parameter left out of chat lines translated for " + prov)
	}
}

// checkUnchanged refuses a job whose input changed since it was planned.
// Size and modification time decide quickly; when only the time moved,
// the content hash decides.
func checkUnchanged(ctx context.Context, db *tracker.DB, job *sluice.Job, st os.FileInfo) error {
	fp := job.Fingerprint
	if st.Size() == fp.Size && st.ModTime().Equal(fp.ModTime) {
		return nil
	}
	changed := func(why string) error {
		return usageErr("input %s changed since job %s was planned (%s); run with --job NEW_NAME to start a new job, or restore the file", job.Input, job.ID, why)
	}
	if st.Size() != fp.Size {
		return changed(fmt.Sprintf("size %d, was %d", st.Size(), fp.Size))
	}
	now, err := splitter.FingerprintFile(job.Input)
	if err != nil {
		return err
	}
	if now.Hash != fp.Hash {
		return changed(fmt.Sprintf("modified %s, content differs", st.ModTime().Format(time.RFC3339)))
	}
	return db.UpdateFingerprint(ctx, job.ID, now)
}

// noteSkipInvalid tells a run without --skip-invalid that the plan it
// reuses was made with it: its bad lines were rejected, not refused, and
// stay so (they are in the errors file and, with a custom_id, in the
// output as invalid_request lines). Planning anew is the way to be stopped
// by them.
func noteSkipInvalid(log zerolog.Logger, f *jobFlags, pr *prepared) {
	if pr.job.Rejected == 0 || f.skipInvalid {
		return
	}
	log.Warn().Int64("rejected", pr.job.Rejected).Str("rejects", pr.rejects).
		Msgf("this job was planned with --skip-invalid: %d input lines were rejected and are reported as %s in the errors file; the plan is kept as it was (to be stopped by bad lines instead, fix them or plan a new job with --job NEW_NAME)",
			pr.job.Rejected, splitter.RejectedCode)
}
