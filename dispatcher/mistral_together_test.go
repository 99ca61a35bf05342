package dispatcher_test

import (
	"fmt"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
)

// chatLines are n chat-completion lines over two models, valid for Mistral
// and Together.
func chatLines(n int) []string {
	var ls []string
	for i := 0; i < n; i++ {
		model := []string{"mistral-small-latest", "meta-llama/Llama-3.3-70B-Instruct-Turbo"}[i%2]
		ls = append(ls, fmt.Sprintf(`{"custom_id":"c-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"say %d"}]}}`, i, model, i))
	}
	return ls
}

// TestHostileMistralTogether: each hostile knob alone, then all at once,
// against the Mistral and Together families: every request ends exactly
// once and succeeded, no success is bought twice, and re-executions happen
// only for results the provider spoiled or lost.
func TestHostileMistralTogether(t *testing.T) {
	t.Parallel() // its own emulator and tracker: beside the other long tests
	for _, family := range []string{"mistral", "together"} {
		for _, tc := range []struct {
			name  string
			opts  emulator.Options
			fired func(emulator.Stats) int64
			twice func(emulator.Stats) int64
		}{
			{"malformed", emulator.Options{MalformedLineRate: 0.2}, func(s emulator.Stats) int64 { return s.LinesMalformed },
				func(s emulator.Stats) int64 { return s.LinesMalformed }},
			{"unknown", emulator.Options{UnknownCustomIDRate: 0.2}, func(s emulator.Stats) int64 { return s.LinesUnknown }, nil},
			{"duplicates", emulator.Options{DuplicateLineRate: 0.3, LineErrorRate: 0.2}, func(s emulator.Stats) int64 { return s.LinesDuplicated },
				func(s emulator.Stats) int64 { return s.LinesErrored }},
			{"truncated", emulator.Options{TruncateDownloadRate: 0.3}, func(s emulator.Stats) int64 { return s.DownloadsTruncated }, nil},
			{"output404", emulator.Options{OutputFile404Rate: 0.4}, func(s emulator.Stats) int64 { return s.LinesLost },
				func(s emulator.Stats) int64 { return s.LinesLost }},
			{"stuck", emulator.Options{StuckRate: 0.5}, func(s emulator.Stats) int64 { return s.BatchesStuck }, nil},
			{"stuck-validating", emulator.Options{StuckRate: 0.5, StuckPhase: "validating"}, func(s emulator.Stats) int64 { return s.BatchesStuck }, nil},
			{"forgotten", emulator.Options{ForgetBatchRate: 0.4}, func(s emulator.Stats) int64 { return s.BatchesForgotten }, nil},
			{"expired", emulator.Options{ExpireRate: 0.4}, func(s emulator.Stats) int64 { return s.BatchesExpired }, nil},
			{"validation", emulator.Options{ValidationFailRate: 0.4}, func(s emulator.Stats) int64 { return s.BatchesFailed }, nil},
			{"everything", emulator.Options{MalformedLineRate: 0.1, UnknownCustomIDRate: 0.1, DuplicateLineRate: 0.1,
				TruncateDownloadRate: 0.2, OutputFile404Rate: 0.2, StuckRate: 0.2, ForgetBatchRate: 0.2, HTTPFaultRate: 0.1,
				FaultKinds: []string{"429", "500", "reset"}},
				func(s emulator.Stats) int64 { return s.LinesMalformed + s.BatchesStuck + s.BatchesForgotten },
				func(s emulator.Stats) int64 { return s.LinesMalformed + s.LinesLost }},
		} {
			t.Run(family+"-"+tc.name, func(t *testing.T) {
				t.Parallel()
				tc.opts.Seed = 21
				r := newRig(t, family, chatLines(30), sluice.Limits{MaxBatchRequests: 6}, 10, tc.opts)
				r.run(hostileOptions(r))
				st := r.emu.Stats()
				if tc.fired(st) == 0 {
					t.Fatalf("the knob never fired: the test proves nothing (%+v)", st)
				}
				var twice int64
				if tc.twice != nil {
					twice = tc.twice(st)
				}
				if tc.name == "duplicates" {
					// Injected 429/500 lines are retried: executed again by design.
					checkNothingLost(t, r, twice)
					return
				}
				checkHostile(t, r, twice)
				if fs := st.ByFamily[family]; fs.BatchesCreated == 0 || fs.RequestsProcessed == 0 {
					t.Fatalf("%s counters %+v", family, fs)
				}
			})
		}
	}
}
