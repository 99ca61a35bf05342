package splitter_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

// FuzzSplit: random small files never make Split panic, and every plan
// it commits keeps the invariants (limits, grouping, order, rows). Seeds
// are in testdata/fuzz/FuzzSplit.
func FuzzSplit(f *testing.F) {
	g1, g2 := goodLines("openai")
	f.Add([]byte(g1+"\n"+g2+"\n"), uint16(300), uint8(2))
	f.Add([]byte(g1+"\n\n"+g1+"\n{}\n"+g2), uint16(0), uint8(0))
	f.Add(cloudflareInput(5)[:300], uint16(200), uint8(1))
	for _, c := range badLines() {
		f.Add([]byte(g1+"\n"+c.line+"\n"+g2+"\n"), uint16(250), uint8(3))
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, content []byte, maxBytes uint16, maxReq uint8) {
		if len(content) > 64<<10 {
			return
		}
		e.t = t
		in := e.write("fuzz.jsonl", content)
		lim := sluice.Limits{MaxBatchBytes: int64(maxBytes), MaxBatchRequests: int(maxReq)}
		r := e.split(in, "openai", lim, func(c *splitter.Config) { c.SkipInvalid = true })
		defer os.RemoveAll(r.cfg.Dir)
		want := validLines(t, r.cfg, content)
		if r.err != nil {
			if !errors.Is(r.err, splitter.ErrNoRequests) || len(want) != 0 {
				t.Fatalf("split: %v (%d valid lines)", r.err, len(want))
			}
			return
		}
		checkPlan(t, r, want)
		nonBlank := int64(0)
		for _, l := range bytes.Split(content, []byte{'\n'}) {
			if _, blank, _ := splitter.ValidateLine(r.cfg, l); !blank {
				nonBlank++
			}
		}
		if r.res.Requests+r.res.Rejected != nonBlank {
			t.Fatalf("%d requests + %d rejected != %d non-blank lines", r.res.Requests, r.res.Rejected, nonBlank)
		}
	})
}
