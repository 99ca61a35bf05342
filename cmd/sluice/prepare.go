package main

import (
	"context"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// workerOpts make openJob's caller a worker of the job (run).
type workerOpts struct {
	// join shares the job with other workers on this machine (--join):
	// the job's lock is taken shared. Without it the lock is exclusive,
	// as for a lone run.
	join bool
	ttl  time.Duration // lease time to live
	stop <-chan struct{}
}

// openJob opens the state database, takes the lock of the input's job and
// finds or plans the job (lifecycle.Prepare), with a progress line on a
// terminal. close releases the lock and the database. With wo, the
// process is a worker of the job (docs/scale-out.md, "Many workers"),
// returned as wk: it plans only while it holds the plan role, else waits
// for the plan of the worker that does.
func openJob(ctx context.Context, g *globalFlags, f *jobFlags, p provider.Preset, input string, log zerolog.Logger, wo *workerOpts) (db tracker.Backend, pr *lifecycle.Prepared, wk *lifecycle.Worker, close func(), err error) {
	db, err = g.openDB(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	id, err := f.findJobID(ctx, db, input)
	if err != nil {
		db.Close()
		return nil, nil, nil, nil, err
	}
	var lock *tracker.Lock
	if wo != nil && wo.join {
		lock, err = db.LockJobShared(id)
	} else {
		lock, err = db.LockJob(id)
	}
	if err != nil {
		db.Close()
		return nil, nil, nil, nil, err
	}
	if wo != nil {
		if !wo.join {
			// The job's only driver on a database no other machine uses:
			// the leases a killed run left need not be waited out.
			if err := db.ForgetWorkers(ctx, id); err != nil {
				lock.Unlock()
				db.Close()
				return nil, nil, nil, nil, err
			}
		}
		if wk, err = lifecycle.StartWorker(ctx, db, id, wo.ttl, lock, log); err != nil {
			lock.Unlock()
			db.Close()
			return nil, nil, nil, nil, err
		}
	}
	close = func() {
		wk.Stop()
		lock.Unlock()
		db.Close()
	}
	files, err := jobStore(ctx, f, db.Dir()) // --store (objects.go)
	if err != nil {
		close()
		return nil, nil, nil, nil, err
	}
	spec := f.spec(db, p, input, id, nil, wo != nil && wo.join, log)
	spec.Objects, spec.Files = objects, files
	bar := newPlanProgress(os.Stderr)
	spec.Progress = bar.update
	plan := func() (*lifecycle.Prepared, error) { return lifecycle.Prepare(ctx, db, spec) }
	if wk != nil {
		pr, err = wk.PlanOnce(ctx, wo.stop, plan)
	} else {
		pr, err = plan()
	}
	bar.done()
	if err != nil {
		err = wk.FailureCause(err) // the database gone away while planning, say (lifecycle/lockgate.go)
		close()
		return nil, nil, nil, nil, err
	}
	return db, pr, wk, close, nil
}

// spec is the job these flags define (lifecycle.Spec).
// shared: the job's lock is shared with other workers (--join).
func (f *jobFlags) spec(db tracker.Backend, p provider.Preset, input, id string, progress func(splitter.Progress), shared bool, log zerolog.Logger) lifecycle.Spec {
	return lifecycle.Spec{ID: id, Input: input, Preset: p, Model: f.model, ModelMap: f.modelMap,
		DefaultMaxTokens: f.maxTokens, Limits: f.limits, MaxAttempts: f.maxAttempts, Endpoint: f.endpoint(p), Bucket: f.bucket,
		KeyScope: keyScope(f, p), Reuse: f.reuse, SkipInvalid: f.skipInvalid, Rejects: f.rejects,
		Progress: progress, Log: log,
		Check: func(ctx context.Context, job *sluice.Job) error { return f.checkSettings(ctx, db, job, p, shared, log) }}
}

// noteSkipInvalid tells a run without --skip-invalid that the plan it
// reuses was made with it: its bad lines were rejected, not refused, and
// stay so (they are in the errors file and, with a custom_id, in the
// output as invalid_request lines). Planning anew is the way to be stopped
// by them.
func noteSkipInvalid(log zerolog.Logger, f *jobFlags, pr *lifecycle.Prepared) {
	if pr.Job.Rejected == 0 || f.skipInvalid {
		return
	}
	log.Warn().Int64("rejected", pr.Job.Rejected).Str("rejects", pr.Rejects).
		Msgf("this job was planned with --skip-invalid: %d input lines were rejected and are reported as %s in the errors file; the plan is kept as it was (to be stopped by bad lines instead, fix them or plan a new job with --job NEW_NAME)",
			pr.Job.Rejected, splitter.RejectedCode)
}
