package dispatcher_test

import (
	"context"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
)

// Hostile provider output: every wrong thing the emulator can send is
// detected, recorded with a reason, and its requests retried or reported;
// nothing is silently accepted or dropped, and no success is bought twice.

// hostileOptions are the rig's options with the bounds of hostile handling
// made small enough for a test.
func hostileOptions(r *rig) dispatcher.Options {
	o := r.options()
	o.Concurrency = 1 // the emulator's fates follow call order: keep it fixed
	o.MaxFetchFailures = 2
	o.StuckAfter = 30 * time.Millisecond
	o.StuckCancelWait = time.Second
	return o
}

// wantRecorded fails unless the tracker kept an attempt error of the job
// with this code whose message matches re.
func wantRecorded(t *testing.T, r *rig, code sluice.ErrorCode, re string) {
	t.Helper()
	errs, _, err := r.db.AttemptErrors(context.Background(), r.job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		if e.Code == code && regexp.MustCompile(re).MatchString(e.Message) {
			t.Logf("recorded: chunk %d attempt %d: %s: %s", e.Chunk, e.Attempt, e.Code, e.Message)
			return
		}
	}
	t.Errorf("no attempt error %s matching %q; recorded: %+v", code, re, errs)
}

// checkHostile asserts the job ended with every request final (merged
// checks each custom_id once, in order), all succeeded, no success bought
// twice, and at most allowedTwice re-executions (lines the provider ran but
// whose results it lost must be bought again).
func checkHostile(t *testing.T, r *rig, allowedTwice int64) {
	t.Helper()
	got, sum := r.merged()
	st := r.emu.Stats()
	if sum.Succeeded != int64(len(r.ids)) || sum.Failed != 0 {
		for id, o := range got {
			if o.Error != nil {
				t.Logf("%s: %+v", id, o.Error)
			}
		}
		t.Errorf("succeeded %d failed %d, want all %d succeeded", sum.Succeeded, sum.Failed, len(r.ids))
	}
	if st.LinesSucceeded != sum.Succeeded {
		t.Errorf("emulator delivered %d successes, output has %d: a success was bought twice or lost", st.LinesSucceeded, sum.Succeeded)
	}
	if st.RequestsProcessedMoreThanOnce > allowedTwice {
		t.Errorf("requests processed more than once: %d (allowed %d)", st.RequestsProcessedMoreThanOnce, allowedTwice)
	}
}

var hostilePresets = []struct {
	name  string
	lines func(int) []string
}{{"openai", openAILines}, {"anthropic", anthropicLines}, {"cloudflare", cloudflareLines}, {"gemini", geminiLines}}

// hostileCase is one hostile knob of the emulator run against presets:
// a rig of n lines (sizes[preset] when set), perBatch a batch, attempts
// attempts; the knob must have fired (fired > 0, else the test proves
// nothing), the job must end as checkHostile says, with up to
// fired re-executions when lostRun (lines the provider ran whose results
// it lost), and, when recorded is set, an attempt error of code matching
// it kept.
type hostileCase struct {
	presets               []string
	sizes                 map[string]int
	n, perBatch, attempts int
	opts                  emulator.Options
	fired                 func(emulator.Stats) int64
	what                  string // what never firing means: "no line was malformed"
	lostRun               bool
	code                  sluice.ErrorCode
	recorded              string
}

func (c hostileCase) run(t *testing.T) {
	presets, linesOf := c.presets, map[string]func(int) []string{}
	for _, p := range hostilePresets {
		linesOf[p.name] = p.lines
		if c.presets == nil {
			presets = append(presets, p.name)
		}
	}
	for _, name := range presets {
		t.Run(name, func(t *testing.T) {
			n := c.n
			if m, ok := c.sizes[name]; ok {
				n = m
			}
			r := newRig(t, name, linesOf[name](n), sluice.Limits{MaxBatchRequests: c.perBatch}, c.attempts, c.opts)
			r.run(hostileOptions(r))
			fired := c.fired(r.emu.Stats())
			if fired == 0 {
				t.Fatal(c.what + ": the test proves nothing")
			}
			allowed := int64(0)
			if c.lostRun {
				allowed = fired
			}
			checkHostile(t, r, allowed)
			if c.recorded != "" {
				wantRecorded(t, r, c.code, c.recorded)
			}
		})
	}
}

func TestHostileMalformedLines(t *testing.T) {
	t.Parallel()
	// A malformed line's request ran, but its result is lost: it must be
	// bought again; nothing else may be.
	hostileCase{n: 30, perBatch: 10, attempts: 6, opts: emulator.Options{Seed: 4, MalformedLineRate: 0.2},
		fired: func(st emulator.Stats) int64 { return st.LinesMalformed }, what: "no line was malformed", lostRun: true,
		code: sluice.CodeProviderOutput, recorded: `\d+ malformed result line\(s\) skipped, their requests counted as missing: \S+:\d+ \(`}.run(t)
}

func TestHostileUnknownCustomIDs(t *testing.T) {
	t.Parallel()
	hostileCase{n: 30, perBatch: 10, attempts: 3, opts: emulator.Options{Seed: 6, UnknownCustomIDRate: 0.3},
		fired: func(st emulator.Stats) int64 { return st.LinesUnknown }, what: "no extra line",
		code: sluice.CodeProviderOutput, recorded: `\d+ result\(s\) for custom_ids not in this batch ignored`}.run(t)
}

// TestHostileDuplicateLines: a success and an error for the same custom_id
// keep the success, whatever their order; anything else keeps one line.
func TestHostileDuplicateLines(t *testing.T) {
	t.Parallel()
	// Keeping the error copy would retry, and buy, a done request.
	hostileCase{n: 30, perBatch: 10, attempts: 3, opts: emulator.Options{Seed: 8, DuplicateLineRate: 0.4},
		fired: func(st emulator.Stats) int64 { return st.LinesDuplicated }, what: "no duplicate",
		code: sluice.CodeProviderOutput, recorded: `\d+ duplicate result\(s\) for the same custom_id`}.run(t)
	// Duplicated permanent failures stay failures, once.
	r := newRig(t, "openai", openAILines(30), sluice.Limits{MaxBatchRequests: 10}, 3,
		emulator.Options{Seed: 8, DuplicateLineRate: 0.5, LineErrorRate: 0.5})
	r.run(hostileOptions(r))
	_, sum := r.merged()
	if st := r.emu.Stats(); sum.Failed == 0 || st.LinesSucceeded != sum.Succeeded {
		t.Errorf("failed %d; emulator successes %d, output %d", sum.Failed, st.LinesSucceeded, sum.Succeeded)
	}
}

func TestHostileTruncatedDownloads(t *testing.T) {
	t.Parallel()
	// The HTTP layer sees the short body and downloads again.
	hostileCase{n: 20, perBatch: 5, attempts: 3, opts: emulator.Options{Seed: 3, TruncateDownloadRate: 0.5},
		fired: func(st emulator.Stats) int64 { return st.DownloadsTruncated }, what: "no download was cut"}.run(t)
	// Every download cut: nothing from a cut file is accepted; the attempts
	// end and the requests are reported with the reason.
	r := newRig(t, "openai", openAILines(12), sluice.Limits{MaxBatchRequests: 10}, 2,
		emulator.Options{Seed: 2, TruncateDownloadRate: 1})
	r.run(hostileOptions(r))
	got, sum := r.merged()
	if sum.Succeeded != 0 {
		t.Errorf("%d successes accepted from downloads that were all cut short", sum.Succeeded)
	}
	for id, o := range got {
		if o.Error == nil || o.Error.Code != sluice.CodeResultsUnavailable || o.Error.Attempts != 2 ||
			!strings.Contains(o.Error.Message, "unexpected EOF") {
			t.Errorf("%s: %+v, want results_unavailable (unexpected EOF) after 2 attempts", id, o.Error)
		}
	}
	wantRecorded(t, r, sluice.CodeResultsUnavailable, `download results: .*unexpected EOF.* \(failed on 2 polls in a row\)`)
}

func TestHostileOutputFile404(t *testing.T) {
	t.Parallel()
	// Lost results were run: buying them again is the only way.
	hostileCase{presets: []string{"openai", "anthropic", "gemini"}, sizes: map[string]int{"openai": 30}, n: 20,
		perBatch: 10, attempts: 6, opts: emulator.Options{Seed: 5, OutputFile404Rate: 0.4},
		fired: func(st emulator.Stats) int64 { return st.LinesLost }, what: "no output file was lost", lostRun: true,
		code: sluice.CodeResultsUnavailable, recorded: `download results: .*404.* \(failed on 2 polls in a row\)`}.run(t)
	// Every output lost, attempts spent: reported, not stuck, not dropped.
	r := newRig(t, "openai", openAILines(12), sluice.Limits{MaxBatchRequests: 10}, 2,
		emulator.Options{Seed: 5, OutputFile404Rate: 1})
	r.run(hostileOptions(r))
	got, _ := r.merged()
	for id, o := range got {
		if o.Error == nil || o.Error.Code != sluice.CodeResultsUnavailable || !strings.Contains(o.Error.Message, "404") {
			t.Errorf("%s: %+v, want results_unavailable naming the 404", id, o.Error)
		}
	}
}

// stuckSeed is a seed under which some batch of the case gets stuck and
// some does not.
func stuckSeed(preset, phase string) int64 {
	if preset == "gemini" && phase == "validating" {
		return 5
	}
	return 3
}

func TestHostileStuckBatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		preset, phase string
		code          sluice.ErrorCode
		want          string
		rate          float64
	}{
		// Stuck after every line ran: cancelling delivers every result.
		{"openai", "finalizing", sluice.CodeBatchStuck, `stuck in finalizing for \S+; cancelled at the provider`, 1},
		{"anthropic", "finalizing", sluice.CodeBatchStuck, `stuck in in_progress for \S+; cancelled at the provider`, 1},
		// Stuck before anything ran: cancelled empty, retried in a new batch.
		{"openai", "validating", sluice.CodeBatchStuck, `stuck in validating for \S+; cancelled at the provider`, 0.5},
		{"gemini", "finalizing", sluice.CodeBatchStuck, `stuck in BATCH_STATE_RUNNING for \S+; cancelled at the provider`, 1},
		{"gemini", "validating", sluice.CodeBatchStuck, `stuck in BATCH_STATE_PENDING for \S+; cancelled at the provider`, 0.5},
		// No cancel at Cloudflare: the attempt fails, the requests go on.
		{"cloudflare", "finalizing", sluice.CodeBatchStuck, `stuck in running for \S+; cancel at the provider failed`, 0.5},
	} {
		t.Run(tc.preset+"-"+tc.phase, func(t *testing.T) {
			checkBatchLoss(t, tc.preset, 10, emulator.Options{Seed: stuckSeed(tc.preset, tc.phase), StuckRate: tc.rate, StuckPhase: tc.phase},
				"no batch got stuck", func(st emulator.Stats) bool { return st.BatchesStuck > 0 }, tc.code, tc.want)
		})
	}
}

// checkBatchLoss runs preset's lines (18 for openai, 12 for the others)
// in batches of at most max under the emulator's opts, and checks that the
// loss happened (happened; else what, and the test proves nothing), that
// nothing was lost or done twice, and that the requests it failed record
// code with a message matching want.
func checkBatchLoss(t *testing.T, preset string, max int, opts emulator.Options, what string, happened func(emulator.Stats) bool, code sluice.ErrorCode, want string) {
	t.Helper()
	lines := map[string][]string{"openai": openAILines(18), "anthropic": anthropicLines(12), "cloudflare": cloudflareLines(12), "gemini": geminiLines(12)}[preset]
	r := newRig(t, preset, lines, sluice.Limits{MaxBatchRequests: max}, 8, opts)
	r.run(hostileOptions(r))
	if !happened(r.emu.Stats()) {
		t.Fatal(what + ": the test proves nothing")
	}
	checkHostile(t, r, 0)
	wantRecorded(t, r, code, want)
}

func TestHostileForgottenBatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		preset string
		code   sluice.ErrorCode
		want   string
	}{
		{"openai", sluice.CodeBatchNotFound, `batch \S+: .*not found at provider`},
		{"anthropic", sluice.CodeBatchNotFound, `batch \S+: .*not found at provider`},
		{"gemini", sluice.CodeBatchNotFound, `batch \S+: .*not found at provider`},
		// Cloudflare answers an unknown request_id with a 400: refused for good.
		{"cloudflare", sluice.CodePollRefused, `poll refused: .*unknown request_id.* \(failed on 2 polls in a row\)`},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			checkBatchLoss(t, tc.preset, 5, emulator.Options{Seed: 7, ForgetBatchRate: 0.4},
				"no batch was forgotten", func(st emulator.Stats) bool { return st.BatchesForgotten > 0 }, tc.code, tc.want)
		})
	}
}

// TestHostileEverythingAtOnce: all the knobs together still end with every
// request exactly once and no success bought twice, for the OpenAI and the
// Gemini family.
func TestHostileEverythingAtOnce(t *testing.T) {
	t.Parallel()
	for preset, lines := range map[string][]string{"openai": openAILines(45), "gemini": geminiLines(45)} {
		t.Run(preset, func(t *testing.T) {
			r := newRig(t, preset, lines, sluice.Limits{MaxBatchRequests: 8}, 10,
				emulator.Options{Seed: 12, MalformedLineRate: 0.1, UnknownCustomIDRate: 0.1, DuplicateLineRate: 0.1,
					TruncateDownloadRate: 0.2, OutputFile404Rate: 0.2, StuckRate: 0.2, ForgetBatchRate: 0.2})
			r.run(hostileOptions(r))
			st := r.emu.Stats()
			checkHostile(t, r, st.LinesMalformed+st.LinesLost)
		})
	}
}

// noCancel is a provider whose cancel is acknowledged but never happens.
type noCancel struct{ sluice.Provider }

func (p noCancel) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	return sluice.Batch{ID: batchID, Status: sluice.BatchCancelling, ProviderStatus: "cancelling"}, nil
}

// TestHostileStuckBatchNeverEnds: a stuck batch that the provider says it
// is cancelling but never ends is given up StuckCancelWait later; with the
// attempts spent, its requests are reported with the reason.
func TestHostileStuckBatchNeverEnds(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(6), sluice.Limits{MaxBatchRequests: 10}, 2,
		emulator.Options{Seed: 1, StuckRate: 1})
	r.prov = noCancel{r.prov}
	o := hostileOptions(r)
	o.StuckCancelWait = 40 * time.Millisecond
	r.run(o)
	got, sum := r.merged()
	if sum.Failed != 6 {
		t.Errorf("failed %d, want all 6", sum.Failed)
	}
	for id, o := range got {
		if o.Error == nil || o.Error.Code != sluice.CodeBatchStuck || o.Error.Attempts != 2 ||
			!strings.Contains(o.Error.Message, "stuck in finalizing for") || !strings.Contains(o.Error.Message, "cancel requested, still cancelling") {
			t.Errorf("%s: %+v", id, o.Error)
		}
	}
	wantRecorded(t, r, sluice.CodeBatchStuck, `stuck in finalizing for \S+; cancel requested, still cancelling \S+ later; its requests go to a new batch`)
}

// diskFull is a provider whose downloads fail on our own disk.
type diskFull struct{ sluice.Provider }

func (p diskFull) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	return nil, &fs.PathError{Op: "write", Path: dir + "/x.jsonl", Err: syscall.ENOSPC}
}

// TestLocalFetchFailureStopsTheRun: a download that fails on our side (a
// full disk) is not the provider's fault: the run stops with the error,
// the batch keeps its fetch tries and is fetched again by the next run.
func TestLocalFetchFailureStopsTheRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(3), sluice.Limits{}, 3, emulator.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dispatcher.New(r.db, diskFull{r.prov}, r.job, hostileOptions(r)).Run(ctx, nil)
	if !errors.Is(err, dispatcher.ErrFatal) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("run: %v, want a fatal disk-full error", err)
	}
	// The first poll that ended its batch hit the disk error: chunks not
	// yet sent by then stay pending (a fatal error starts nothing new).
	chunks, _ := r.db.Chunks(ctx, r.job.ID)
	submitted := 0
	for _, c := range chunks {
		if c.State == sluice.ChunkSubmitted {
			submitted++
		}
		if (c.State != sluice.ChunkSubmitted && c.State != sluice.ChunkPending) || c.FetchFailures != 0 {
			t.Errorf("chunk %d: %s, %d fetch failures; want submitted (or never sent), none spent", c.ID, c.State, c.FetchFailures)
		}
	}
	if submitted == 0 {
		t.Error("no chunk submitted: the disk error was never met")
	}
	r.run(hostileOptions(r))
	checkHostile(t, r, 0)
}
