package openai_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/openai"
)

// TestDecodeSkipsMalformedLines: lines that are no result (not JSON, no
// custom_id, over the line bound, cut short at the end of the file) are
// skipped with file:line, and every good line around them, in every file,
// is still delivered.
func TestDecodeSkipsMalformedLines(t *testing.T) {
	c := newClient(t, "openai", "http://127.0.0.1:1/v1", func(cfg *openai.Config) { cfg.MaxLine = 200 })
	ok := func(id string) string { return `{"custom_id":"` + id + `","response":{"status_code":200,"body":{}}}` }
	out := ptest.WriteFile(t, "b.output.jsonl", strings.Join([]string{
		ok("a"),
		`not json at all`,
		`{"id":"batch_req_1","response":{"status_code":200,"body":{}}}`,
		`{"custom_id":"long","response":{"status_code":200,"body":{"x":"` + strings.Repeat("x", 300) + `"}}}`,
		ok("b"),
		`{"custom_id":"c","response":{"status_co`, // the last line, cut short
	}, "\n"))
	errs := ptest.WriteFile(t, "b.errors.jsonl", `{"custom_id":"d","response":null,"error":{"code":"batch_expired","message":"m"}}`+"\n"+`{]`+"\n")
	got, err := ptest.Decode(c, nil, out, errs)
	if ids := ptest.CustomIDs(got); ids != "a,b,d" {
		t.Errorf("delivered %v, want a,b,d", ids)
	}
	var ml *sluice.MalformedLines
	if !errors.As(err, &ml) || ml.Count != 5 || !errors.Is(err, sluice.ErrMalformed) {
		t.Fatalf("err %v, want 5 malformed lines", err)
	}
	var where []string
	for _, e := range ml.Lines {
		where = append(where, e.Where())
	}
	if got := strings.Join(where, " "); got != "b.output.jsonl:2 b.output.jsonl:3 b.output.jsonl:4 b.output.jsonl:6 b.errors.jsonl:2" {
		t.Errorf("skipped %s", got)
	}
	// The callback's own error still ends Decode at once.
	stop := errors.New("stop")
	if err := c.Decode(context.Background(), sluice.BatchRef{}, []string{out}, nil, func(sluice.Result) error { return stop }); err != stop {
		t.Errorf("callback error: %v", err)
	}
	// A file that cannot be read is no malformed line.
	if err := c.Decode(context.Background(), sluice.BatchRef{}, []string{filepath.Join(t.TempDir(), "gone")}, nil, func(sluice.Result) error { return nil }); err == nil || errors.Is(err, sluice.ErrMalformed) {
		t.Errorf("missing file: %v", err)
	}
}
