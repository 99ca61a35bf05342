package splitter_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

// TestMinimumBatchRequests: under a minimum of requests per batch
// (Bedrock's minimum records per job) no chunk falls under it, whatever
// the group sizes and the interleaving of groups, and each group's chunks
// are balanced (sizes differ by one at most); every request is in exactly
// one chunk, and the plan check holds (rows, offsets, items); duplicates
// are still caught; a group under the minimum is refused with its count
// and the minimum.
func TestMinimumBatchRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		a, b, max, min int
	}{
		{11, 0, 5, 2}, {12, 7, 5, 2}, {100, 3, 10, 3}, {23, 23, 10, 5}, {10, 10, 10, 5}, {57, 31, 20, 7}, {6, 6, 5, 3},
	} {
		var in strings.Builder
		for i := 0; i < tc.a || i < tc.b; i++ {
			if i < tc.a {
				fmt.Fprintf(&in, `{"custom_id":"a%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m-a","messages":[{"role":"user","content":"x%d"}]}}`+"\n", i, i)
			}
			if i < tc.b {
				fmt.Fprintf(&in, `{"custom_id":"b%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m-b","messages":[{"role":"user","content":"y%d"}]}}`+"\n", i, i)
			}
		}
		path := e.write(fmt.Sprintf("in-%d-%d-%d-%d.jsonl", tc.a, tc.b, tc.max, tc.min), []byte(in.String()))
		lim := sluice.Limits{MaxBatchRequests: tc.max, MinBatchRequests: tc.min}
		r := e.mustSplit(path, "openai", lim, nil)
		checkPlan(t, r, validLines(t, r.cfg, []byte(in.String())))
		perModel := map[string]int{}
		sizes := map[string][2]int{}
		for _, c := range r.chunks {
			s, ok := sizes[c.Model]
			if !ok {
				s = [2]int{c.Requests, c.Requests}
			}
			sizes[c.Model] = [2]int{min(s[0], c.Requests), max(s[1], c.Requests)}
			if c.Requests < tc.min || c.Requests > tc.max {
				t.Errorf("%+v: chunk %d of %s has %d requests, want %d..%d", tc, c.ID, c.Model, c.Requests, tc.min, tc.max)
			}
			perModel[c.Model] += c.Requests
		}
		for m, s := range sizes {
			if s[1]-s[0] > 1 {
				t.Errorf("%+v: chunks of %s hold %d to %d requests: not balanced", tc, m, s[0], s[1])
			}
		}
		if perModel["m-a"] != tc.a || perModel["m-b"] != tc.b {
			t.Errorf("%+v: requests per model %v", tc, perModel)
		}
	}

	// A group under the minimum: refused with the numbers.
	var in strings.Builder
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&in, `{"custom_id":"a%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m-a","messages":[{"role":"user","content":"x"}]}}`+"\n", i)
	}
	fmt.Fprintf(&in, `{"custom_id":"b0","method":"POST","url":"/v1/chat/completions","body":{"model":"m-b","messages":[{"role":"user","content":"y"}]}}`+"\n")
	r := e.split(e.write("under.jsonl", []byte(in.String())), "openai", sluice.Limits{MaxBatchRequests: 5, MinBatchRequests: 2}, nil)
	if !errors.Is(r.err, splitter.ErrBelowMinimum) || !strings.Contains(fmt.Sprint(r.err), `model "m-b" has 1 request(s), under the provider's minimum of requests per batch of 2`) {
		t.Errorf("a group of 1 under a minimum of 2: %v", r.err)
	}

	// Duplicates are caught as without a minimum.
	dup := `{"custom_id":"a0","method":"POST","url":"/v1/chat/completions","body":{"model":"m-a","messages":[{"role":"user","content":"x"}]}}` + "\n"
	r = e.split(e.write("dup.jsonl", []byte(dup+dup+dup)), "openai", sluice.Limits{MaxBatchRequests: 5, MinBatchRequests: 2}, nil)
	var le *splitter.LineError
	if !errors.As(r.err, &le) || le.Line != 2 || !strings.Contains(le.Reason, "duplicate custom_id") {
		t.Errorf("a duplicate of a held request: %v", r.err)
	}
}
