package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-batch/sluice"
)

// NextAction says what the next `sluice run` of job would do, from its
// chunks as they stand (sluice status shows it).
func NextAction(j *sluice.Job, chunks []*sluice.Chunk) string {
	var nextPoll time.Time
	live, waiting, unsettled := 0, 0, 0
	for _, c := range chunks {
		switch c.State {
		case sluice.ChunkSubmitted:
			live++
			if nextPoll.IsZero() || c.NextPollAt.Before(nextPoll) {
				nextPoll = c.NextPollAt
			}
		case sluice.ChunkPending, sluice.ChunkUploaded:
			waiting++
		case sluice.ChunkUploading, sluice.ChunkCreating:
			unsettled++
		}
	}
	poll := ""
	if live > 0 {
		when := nextPoll.Local().Format(time.TimeOnly)
		if !nextPoll.After(time.Now()) {
			when = "now"
		}
		poll = fmt.Sprintf("poll %d live batches (next poll %s)", live, when)
	}
	var parts []string
	switch j.State {
	case sluice.JobPlanning:
		return "plan again from scratch (planning was interrupted)"
	case sluice.JobDone:
		return "nothing: output written"
	case sluice.JobMerging:
		return "merge the results into the output"
	case sluice.JobPlanned:
		return "submit " + plural(int64(waiting), "batch", "batches")
	case sluice.JobCancelled:
		if unsettled > 0 {
			parts = append(parts, "check "+plural(int64(unsettled), "chunk", "chunks")+" caught mid-call (uploading/creating) against the provider")
		}
		if live > 0 {
			parts = append(parts, fmt.Sprintf("wait for %d cancelled batches to end", live))
		}
		if waiting > 0 {
			parts = append(parts, fmt.Sprintf("fail %d unsubmitted batches as cancelled", waiting))
		}
		parts = append(parts, "merge what completed")
		return strings.Join(parts, "; ") + " ('sluice cancel " + j.ID + "' or 'sluice run' again)"
	}
	if unsettled > 0 {
		parts = append(parts, "check "+plural(int64(unsettled), "chunk", "chunks")+" caught mid-call (uploading/creating) against the provider")
	}
	if waiting > 0 {
		parts = append(parts, "submit "+plural(int64(waiting), "batch", "batches"))
	}
	if poll != "" {
		parts = append(parts, poll)
	}
	if len(parts) == 0 {
		return "merge the results into the output"
	}
	return strings.Join(parts, "; ")
}

// LockHolder returns the pid of a live sluice process holding the job's
// lock, or 0. It reads the pid the holder wrote into the lock file (a
// clean exit empties it) and checks that the process exists; it never
// takes the lock, which could make a cron run starting at that moment fail.
func LockHolder(stateDir, job string) int {
	b, err := os.ReadFile(filepath.Join(stateDir, "locks", job+".lock"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0 // killed without cleaning up: the kernel freed the lock
	}
	return pid
}

// plural is n with the noun in the number it takes: "1 chunk", "1,200
// batches".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r != '-' && s[i-1] != '-' && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String() + " " + many
}
