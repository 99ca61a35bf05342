package lifecycle

// A job's identity (docs/architecture.md): which job a command means is
// decided by resolved values, never by how they were given, and two jobs
// never write one output. cmd/sluice/identity.go resolves the values
// (flags, then the environment) and calls these.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// NormalizeURL drops what does not change where a URL points: a trailing
// slash and the case of its scheme and host; and any credentials in it,
// which are never stored or shown.
func NormalizeURL(s string) string {
	s = strings.TrimRight(strings.TrimSpace(s), "/")
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		if i := strings.LastIndex(s, "@"); i >= 0 { // unparsable: drop what may be user:password@
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				return s[:j+3] + s[i+1:]
			}
		}
		return s
	}
	u.User = nil
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	return strings.TrimRight(u.String(), "/")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// DerivedJobName is the name of a job not named by --job: the input's
// base name, the provider, and a hash of the input's path, the provider
// and key (what else makes the job another one: its endpoint, a model
// map).
func DerivedJobName(absInput, prov, key string) string {
	base := filepath.Base(absInput)
	for _, ext := range []string{".gz", ".zst", ".jsonl", ".json", ".ndjson", ".txt"} {
		base = strings.TrimSuffix(base, ext)
	}
	base = unsafeName.ReplaceAllString(base, "_")
	if len(base) > 40 {
		base = base[:40]
	}
	sum := sha256.Sum256([]byte(absInput + "\x00" + prov + "\x00" + key))
	return fmt.Sprintf("%s-%s-%s", strings.Trim(base, "._-"), prov, hex.EncodeToString(sum[:4]))
}

// FindJobID is the job a command means: id, or legacy, the name an
// earlier version derived for the same input, when a job was planned under
// that name with no endpoint recorded (by that version, for the same
// endpoint given from the environment), so upgrading sluice mid-job never
// starts the job over and buys its batches again.
func FindJobID(ctx context.Context, db Store, id, legacy string) (string, error) {
	if legacy == id {
		return id, nil
	}
	if _, err := db.Job(ctx, id); err == nil || !errors.Is(err, tracker.ErrNotFound) {
		return id, err
	}
	j, err := db.Job(ctx, legacy)
	switch {
	case errors.Is(err, tracker.ErrNotFound):
		return id, nil
	case err != nil:
		return "", err
	case j.Endpoint != "": // planned by this version: another endpoint's job
		return id, nil
	}
	return legacy, nil
}

// CheckOutputFree refuses (ErrBadInput) to run job id into an output path
// that another job, not done yet, will write: two jobs never write one
// file. A done job's output is written; it no longer holds the path (a
// new job may replace the file, as any command writing there would).
func CheckOutputFree(ctx context.Context, db Store, id, out string) error {
	j, err := OutputHolder(ctx, db, id, out)
	if err != nil || j == nil {
		return err
	}
	return OutputTaken(j, out)
}

// OutputHolder is the job other than id, not done yet, whose output is
// out, or nil.
func OutputHolder(ctx context.Context, db Store, id, out string) (*sluice.Job, error) {
	jobs, err := db.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if j.ID != id && j.Output == out && j.State != sluice.JobDone {
			return j, nil
		}
	}
	return nil, nil
}

// OutputTaken is CheckOutputFree's refusal: out is the output of job j.
func OutputTaken(j *sluice.Job, out string) error {
	return badInputf("--out %s is the output of job %s (%s, input %s): two jobs never write one file; "+
		"continue that job (sluice run ... --job %s), wait until it is done, or choose another --out",
		out, j.ID, j.State, j.Input, j.ID)
}
