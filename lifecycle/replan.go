package lifecycle

// No dead ends (issue 21, item 5): a job that has nothing at the provider
// yet may be planned again when a command says otherwise about what shaped
// its plan (its endpoint, its model map, ...); once anything of it may be
// at the provider, the command is refused, naming what is there.
// cmd/sluice/identity.go decides; README.md section 4 ("Flags on a job
// that exists") is the user's side.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// Footprint is what a job may have at the provider.
type Footprint struct {
	// Batches counts the chunks with a batch id; BatchIDs are the first
	// few of those ids.
	Batches  int
	BatchIDs []string
	// Files counts the chunks with an uploaded file and no batch.
	Files int
	// Intents counts the chunks in an intent state (uploading, creating):
	// their call may have reached the provider.
	Intents int
	// Settled counts the chunks that ended (done, failed) without a batch
	// id or file id, and Retries the chunks of later attempts: either
	// means a batch of the job ran or was refused.
	Settled, Retries int
	// Realtime counts the chunks with calls of the realtime fallback
	// recorded (answered, or sent with their answer unknown): bought, or
	// maybe bought, though their chunk still looks pending.
	Realtime int
}

// footprintIDs is how many batch ids a Footprint keeps.
const footprintIDs = 3

// JobFootprint reads what job may have at the provider from its chunks.
func JobFootprint(ctx context.Context, db Store, job string) (Footprint, error) {
	cs, err := db.Chunks(ctx, job)
	if err != nil {
		return Footprint{}, err
	}
	var f Footprint
	for _, c := range cs {
		switch {
		case c.BatchID != "":
			f.Batches++
			if len(f.BatchIDs) < footprintIDs {
				f.BatchIDs = append(f.BatchIDs, c.BatchID)
			}
		case c.FileID != "":
			f.Files++
		case c.State == sluice.ChunkUploading || c.State == sluice.ChunkCreating:
			f.Intents++
		case c.State != sluice.ChunkPending:
			f.Settled++
		case c.Attempt > 1:
			f.Retries++
		}
	}
	if rs, ok := db.(sluice.RealtimeStore); ok {
		ids, err := rs.RealtimeChunks(ctx, job)
		if err != nil {
			return Footprint{}, err
		}
		f.Realtime = len(ids)
	}
	return f, nil
}

// Empty reports whether nothing of the job ever reached the provider.
func (f Footprint) Empty() bool {
	return f.Batches == 0 && f.Files == 0 && f.Intents == 0 && f.Settled == 0 && f.Retries == 0 && f.Realtime == 0
}

// String says what is at the provider, for messages: "3 batches (b1, b2,
// b3, ...)", "an uploaded file", ...
func (f Footprint) String() string {
	var parts []string
	if f.Batches > 0 {
		ids := strings.Join(f.BatchIDs, ", ")
		if f.Batches > len(f.BatchIDs) {
			ids += ", ..."
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", plural(int64(f.Batches), "batch", "batches"), ids))
	}
	if f.Files > 0 {
		parts = append(parts, plural(int64(f.Files), "uploaded file", "uploaded files"))
	}
	if f.Intents > 0 {
		parts = append(parts, plural(int64(f.Intents), "chunk", "chunks")+" whose upload or create may have landed")
	}
	if f.Realtime > 0 {
		parts = append(parts, plural(int64(f.Realtime), "chunk", "chunks")+" sent through the synchronous API")
	}
	if f.Settled+f.Retries > 0 {
		parts = append(parts, plural(int64(f.Settled+f.Retries), "chunk", "chunks")+" submitted before")
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// Replaceable reports whether job may be planned again: it is planned or
// running and nothing of it is at the provider.
func Replaceable(job *sluice.Job, f Footprint) bool {
	return (job.State == sluice.JobPlanned || job.State == sluice.JobRunning) && f.Empty()
}

// Replan is what Spec.Check returns for a job it found replaceable and
// planned otherwise than this command says: Prepare deletes the job and
// plans it again under its name, with the Spec after Keep.
type Replan struct {
	// Why names what changed, for the log: "--base-url X (was Y)".
	Why string
	// Keep, if set, gives the Spec the job's own values of what the
	// command left out.
	Keep func(*Spec)
}

func (r *Replan) Error() string { return "plan again: " + r.Why }

// CanonicalModelMap is a --model-map as a job records it: its pairs
// sorted, "old=new,..." ("" for none). An unparsable map is returned as
// it is (the plan refuses it).
func CanonicalModelMap(s string) string {
	m, err := provider.ParseModelMap(s)
	if err != nil {
		return s
	}
	pairs := make([]string, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// DeleteReplaceable deletes job (found replaceable) and its directory, for
// a command that plans it again or plans its input under another name
// into its output. The caller holds the job's lock.
func DeleteReplaceable(ctx context.Context, db Store, job *sluice.Job) error {
	if err := db.DeleteJob(ctx, job.ID); err != nil {
		return err
	}
	return os.RemoveAll(job.Dir)
}
