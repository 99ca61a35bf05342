package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
	"github.com/sluice-batch/sluice/translate"
)

// Spec is what defines a job's plan: the input, the provider preset, and
// what shapes the requests and the chunks.
type Spec struct {
	// ID is the job's name (cmd/sluice derives it from the input, the
	// provider and its endpoint unless --job names it).
	ID string
	// Input is the input file's absolute path, or an object's URL
	// (s3://BUCKET/KEY, found through Objects: objects.go).
	Input string
	// Objects finds the objects that URLs name; nil when none is used.
	Objects Objects
	// Files, if set, is where the job's files are kept besides the job
	// directory, then a cache of them (--store; objects.go); nil: the
	// state directory only.
	Files  objstore.Store
	Preset provider.Preset
	// Model is the model of lines whose body names none.
	Model string
	// ModelMap is "old=new,..." (provider.ParseModelMap); DefaultMaxTokens
	// is max_tokens for translated chat lines that set none.
	ModelMap         string
	DefaultMaxTokens int64
	// Limits override the preset's (zero fields keep the preset's).
	Limits sluice.Limits
	// MaxAttempts per request; 0 is sluice.DefaultMaxAttempts.
	MaxAttempts int
	// Endpoint names where the job's batches live ("" for local).
	Endpoint string
	// Bucket is where the job's batches keep their files at the provider
	// (Vertex, Bedrock; "" for the others): recorded with the job.
	Bucket string
	// KeyScope and Reuse: answers bought by earlier jobs with the same
	// scope are reused (docs/money.md). Prepare adds DefaultMaxTokens to
	// the scope, as the plan uses it.
	KeyScope string
	Reuse    bool
	// SkipInvalid rejects bad lines into Rejects (default rejects.jsonl in
	// the job directory) instead of stopping at the first one.
	SkipInvalid bool
	Rejects     string
	// Progress, if set, is told how planning goes.
	Progress func(splitter.Progress)
	// Check, if set, is called with a job planned before whose input is
	// unchanged, before it is reused: it refuses settings that cannot
	// change, and records those that may (cmd/sluice/identity.go); a
	// *Replan from it makes Prepare plan the job again.
	Check func(ctx context.Context, job *sluice.Job) error
	Log   zerolog.Logger
}

// Prepared is a job ready to run: planned now or found planned before.
type Prepared struct {
	Job    *sluice.Job
	Reused bool             // the plan was made by an earlier command
	Result *splitter.Result // nil when reused
	// Rejects is where bad lines went (SkipInvalid).
	Rejects string
}

func (s *Spec) rejectsPath(dir string) string {
	if s.Rejects != "" {
		return s.Rejects
	}
	return filepath.Join(dir, "rejects.jsonl")
}

// Prepare finds the job of this input or plans it. A job interrupted
// while planning is thrown away and planned again; a job whose input
// changed since it was planned is refused. The caller holds the job's
// lock (tracker.DB.LockJob).
func Prepare(ctx context.Context, db Store, s Spec) (*Prepared, error) {
	log, input, id, p := s.Log, s.Input, s.ID, s.Preset
	st, err := statInput(ctx, s.Objects, input) // a file, or an object
	if err != nil {
		return nil, err
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
		pr, err := s.resume(ctx, db, job, st)
		var rp *Replan
		if !errors.As(err, &rp) {
			return pr, err
		}
		log.Warn().Str("job", id).Msgf("nothing of this job is at the provider yet: planning it again with %s", rp.Why)
		if rp.Keep != nil {
			rp.Keep(&s)
		}
		if err := DeleteReplaceable(ctx, db, job); err != nil {
			return nil, err
		}
	}

	dir := filepath.Join(db.Dir(), "jobs", id)
	os.RemoveAll(dir) // leftovers of an aborted plan
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	attempts := s.MaxAttempts
	if attempts <= 0 {
		attempts = sluice.DefaultMaxAttempts
	}
	job = &sluice.Job{ID: id, Provider: p.Name, Input: input, Model: s.Model, Dir: dir,
		Limits: p.Limits.Override(s.Limits), MaxAttempts: attempts, Endpoint: s.Endpoint,
		StoreKey: sluice.NewStoreKey(id), ModelMap: CanonicalModelMap(s.ModelMap), DefaultMaxTokens: s.DefaultMaxTokens, Bucket: s.Bucket}
	plan, err := db.BeginPlan(ctx, job)
	if err != nil {
		return nil, err
	}
	rejects := s.rejectsPath(dir)
	modelMap, err := provider.ParseModelMap(s.ModelMap)
	if err != nil {
		plan.Abort(context.WithoutCancel(ctx))
		os.RemoveAll(dir)
		return nil, BadInput(err)
	}
	warns := &chatWarnings{}
	codec := p.PlanCodec(provider.ChatOptions{ModelMap: modelMap, DefaultMaxTokens: s.DefaultMaxTokens, Warn: warns.add, Unmapped: warns.addUnmapped})
	res, err := splitter.Split(ctx, splitter.Config{
		Input: input, Open: inputOpener(ctx, s.Objects, input), Dir: dir, Codec: codec, Limits: job.Limits, Model: s.Model,
		SkipInvalid: s.SkipInvalid, RejectsPath: rejects, Progress: s.Progress,
		KeyScope: keyScope(s), Reuse: s.Reuse,
	}, plan)
	if err == nil {
		err = recordReuse(plan, res, log)
	}
	if err == nil {
		// The plan's files are stored before the plan is recorded.
		err = newJobFiles(s.Files, job).putAll(ctx)
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
			return nil, BadInput(err)
		}
		if strings.Contains(err.Error(), input) {
			return nil, err // it names the input already
		}
		return nil, fmt.Errorf("plan %s: %w", input, err)
	}
	warns.log(log, input, p.Name)
	return &Prepared{Job: job, Result: res, Rejects: rejects}, nil
}

// resume checks a job planned before (its input unchanged, its files
// where the store keeps them) and the command's settings against it
// (Check): the job as it is, or a *Replan from Check.
func (s *Spec) resume(ctx context.Context, db Store, job *sluice.Job, st inputInfo) (*Prepared, error) {
	if err := checkUnchanged(ctx, db, s.Objects, job, st); err != nil {
		return nil, err
	}
	if err := checkStoreHolds(ctx, db, job, s.Files); err != nil {
		return nil, err
	}
	if err := CacheIn(db, job, s.Files); err != nil {
		return nil, err
	}
	if s.Check != nil {
		if err := s.Check(ctx, job); err != nil {
			return nil, err
		}
	}
	return &Prepared{Job: job, Reused: true, Rejects: s.rejectsPath(job.Dir)}, nil
}

// chatWarnings counts, per parameter, the chat completions lines whose
// parameter was left out in translation, so a plan warns once per
// parameter rather than once per line. The splitter's workers add to it
// at once.
type chatWarnings struct {
	mu    sync.Mutex
	by    map[string]*chatWarning
	order []string
	// unmapped counts, per model, the chat lines --model-map does not
	// rename (sent to the provider with the model as written).
	unmapped map[string]*chatWarning
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

func (c *chatWarnings) addUnmapped(line int64, model string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unmapped == nil {
		c.unmapped = map[string]*chatWarning{}
	}
	cw, ok := c.unmapped[model]
	if !ok {
		cw = &chatWarning{first: line}
		c.unmapped[model] = cw
	}
	cw.lines++
	cw.first = min(cw.first, line)
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
	for _, m := range slices.Sorted(maps.Keys(c.unmapped)) {
		cw := c.unmapped[m]
		log.Warn().Str("model", m).Int64("lines", cw.lines).Str("first", fmt.Sprintf("%s:%d", input, cw.first)).
			Msgf("%d chat completions lines have model %q, which --model-map does not rename: they are sent to %s as %q (add %s=NEW to the map if %s does not serve it)",
				cw.lines, m, prov, m, m, prov)
	}
}

// checkUnchanged refuses a job whose input changed since it was planned.
// Size and modification time decide quickly; when only the time moved,
// the content hash decides.
func checkUnchanged(ctx context.Context, db Store, objects Objects, job *sluice.Job, st inputInfo) error {
	fp := job.Fingerprint
	if st.size == fp.Size && st.mtime.Equal(fp.ModTime) {
		return nil
	}
	changed := func(why string) error {
		return badInputf("input %s changed since job %s was planned (%s); run with --job NEW_NAME to start a new job, or restore the file", job.Input, job.ID, why)
	}
	if st.size != fp.Size {
		return changed(fmt.Sprintf("size %d, was %d", st.size, fp.Size))
	}
	hash, err := hashInput(ctx, objects, job.Input)
	if err != nil {
		return err
	}
	if hash != fp.Hash {
		return changed(fmt.Sprintf("modified %s, content differs", st.mtime.Format(time.RFC3339)))
	}
	return db.UpdateFingerprint(ctx, job.ID, sluice.Fingerprint{Size: st.size, ModTime: st.mtime, Hash: hash})
}

// recordReuse records in the plan the requests answered from earlier jobs.
func recordReuse(plan interface {
	SetReused(int64, map[string]int64) error
}, res *splitter.Result, log zerolog.Logger) error {
	if res.ReuseRefused > 0 {
		log.Warn().Int64("requests", res.ReuseRefused).Msg("earlier answers whose results file is gone or changed were not reused; those requests will be bought")
	}
	if res.Reused == 0 {
		return nil
	}
	ev := log.Info().Int64("reused", res.Reused)
	for _, s := range slices.Sorted(maps.Keys(res.ReuseSources)) {
		ev = ev.Int64("from "+s, res.ReuseSources[s])
	}
	ev.Msg("requests answered from earlier jobs' results; not bought again")
	return plan.SetReused(res.Reused, res.ReuseSources)
}

// ReusedFiles are the job's results files of answers reused from earlier
// jobs (docs/money.md), in name order.
func ReusedFiles(job *sluice.Job) []string {
	m, _ := filepath.Glob(filepath.Join(job.Dir, "results", "reused-*.results"))
	sort.Strings(m)
	return m
}

// keyScope is the ledger scope of a plan of s: what is sent for a
// translated line without max_tokens depends on --default-max-tokens, so
// answers bought under one value are not another's. It is taken from the
// Spec as planned (after a Replan's Keep), not from the command's flags.
func keyScope(s Spec) string {
	if s.KeyScope == "" || s.DefaultMaxTokens <= 0 {
		return s.KeyScope
	}
	return s.KeyScope + "\x00default_max_tokens=" + strconv.FormatInt(s.DefaultMaxTokens, 10)
}
