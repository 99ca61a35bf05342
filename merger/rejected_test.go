package merger

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// Rejected input lines go to the errors file, and with a custom_id to the
// output in their input place (before the request of their ordinal), in
// both orders and with runs of intermediate merges; lines without a
// custom_id go to the errors file only. The invariant checks ignore them.
func TestRejectedLinesInTheirPlace(t *testing.T) {
	t.Parallel()
	recs := synth(300, 4)
	rej := []tRec{
		{0, true, `{"custom_id":"bad-a","response":null,"error":{"code":"invalid_request","message":"input line 1: x","line":1}}`},
		{0, true, `{"custom_id":null,"response":null,"error":{"code":"invalid_request","message":"input line 2: y","line":2}}`},
		{17, true, `{"custom_id":"bad-b","response":null,"error":{"code":"invalid_request","message":"input line 20: z","line":20}}`},
		{300, true, `{"custom_id":"bad-c","response":null,"error":{"code":"invalid_request","message":"input line 303: w","line":303}}`},
	}
	var wantOut, wantErrs strings.Builder
	next := 0
	for _, r := range recs {
		for next < len(rej) && rej[next].ord <= r.ord {
			if !strings.Contains(rej[next].line, `"custom_id":null`) {
				wantOut.WriteString(rej[next].line + "\n")
			}
			wantErrs.WriteString(rej[next].line + "\n")
			next++
		}
		wantOut.WriteString(r.line + "\n")
		if r.failed {
			wantErrs.WriteString(r.line + "\n")
		}
	}
	wantOut.WriteString(rej[3].line + "\n")
	wantErrs.WriteString(rej[3].line + "\n")
	for _, order := range []string{"input", "any"} {
		for _, maxOpen := range []int{2, 64} {
			t.Run(fmt.Sprintf("%s-%d", order, maxOpen), func(t *testing.T) {
				dir := t.TempDir()
				files := writeFiles(t, dir, recs, 9, 3)
				rp := writeFile(t, filepath.Join(dir, "rejected.results"), rej)
				out := filepath.Join(dir, "out.jsonl")
				sum := mustMerge(t, Config{Output: out, Files: files, Total: 300, Expected: expectN(300),
					Order: order, MaxOpen: maxOpen, Rejected: rp})
				if sum.Rejected != 4 || sum.Lines != 303 {
					t.Errorf("summary: %+v, want 4 rejected and 303 lines", sum)
				}
				gotOut, gotErrs := readOut(t, out), readOut(t, filepath.Join(dir, "out.errors.jsonl"))
				if order == "input" {
					checkEqual(t, "output", gotOut, wantOut.String())
					checkEqual(t, "errors", gotErrs, wantErrs.String())
				} else {
					checkEqual(t, "output", strings.Join(sortedLines(gotOut), "\n"), strings.Join(sortedLines(wantOut.String()), "\n"))
					checkEqual(t, "errors", strings.Join(sortedLines(gotErrs), "\n"), strings.Join(sortedLines(wantErrs.String()), "\n"))
				}
			})
		}
	}
}
