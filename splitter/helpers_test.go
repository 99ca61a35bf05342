package splitter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// env is a real tracker in a temp state dir.
type env struct {
	t   testing.TB
	ctx context.Context
	db  *tracker.DB
	dir string
	n   int
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	db := check.Try(tracker.Open(context.Background(), filepath.Join(dir, "state"))).Must(t, "Open")
	t.Cleanup(func() { db.Close() })
	return &env{t: t, ctx: context.Background(), db: db, dir: dir}
}

// write puts content in a new file under the env's dir.
func (e *env) write(name string, content []byte) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// run is one plan: the result, the chunks and requests the tracker holds.
type run struct {
	cfg      splitter.Config
	res      *splitter.Result
	err      error
	chunks   []sluice.Chunk
	requests []sluice.Request
}

// split plans input for a provider preset through the real tracker, as
// cmd/sluice does: commit on success, abort on error.
func (e *env) split(input, prov string, lim sluice.Limits, mod func(*splitter.Config)) *run {
	e.t.Helper()
	e.n++
	id := fmt.Sprintf("j%d", e.n)
	p := provider.Presets[prov]
	lim = p.Limits.Override(lim)
	jobDir := filepath.Join(e.dir, "jobs", id)
	cfg := splitter.Config{Input: input, Dir: jobDir, Codec: p.Codec(), Limits: lim,
		RejectsPath: filepath.Join(jobDir, "rejects.jsonl")}
	if mod != nil {
		mod(&cfg)
	}
	plan, err := e.db.BeginPlan(e.ctx, &sluice.Job{ID: id, Provider: prov, Input: input, Dir: jobDir,
		Limits: lim, Model: cfg.Model, MaxAttempts: 3})
	if err != nil {
		e.t.Fatal(err)
	}
	r := &run{cfg: cfg}
	r.res, r.err = splitter.Split(e.ctx, cfg, plan)
	if r.err != nil {
		if err := plan.Abort(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		return r
	}
	if err := plan.Commit(e.ctx, r.res.Fingerprint, r.res.Requests, r.res.Rejected); err != nil {
		e.t.Fatal(err)
	}
	cs, err := e.db.Chunks(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cs {
		r.chunks = append(r.chunks, *c)
	}
	if err := e.db.Requests(e.ctx, id, func(q *sluice.Request) error {
		c := *q
		c.BodyKey = nil
		r.requests = append(r.requests, c)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) mustSplit(input, prov string, lim sluice.Limits, mod func(*splitter.Config)) *run {
	e.t.Helper()
	r := e.split(input, prov, lim, mod)
	if r.err != nil {
		e.t.Fatalf("split: %v", r.err)
	}
	return r
}

// inputLine is one line of a test input as the test knows it.
type inputLine struct {
	line                 int64
	raw                  string
	customID, url, model string
	body                 json.RawMessage
}

// validLines returns the lines ValidateLine accepts, first of each
// custom_id only, as Split should.
func validLines(t testing.TB, cfg splitter.Config, content []byte) []inputLine {
	var out []inputLine
	seen := map[string]bool{}
	for i, l := range bytes.Split(content, []byte{'\n'}) {
		if i == 0 {
			l = bytes.TrimPrefix(l, []byte("\ufeff"))
		}
		_, blank, reason := splitter.ValidateLine(cfg, l)
		if blank {
			continue
		}
		if reason != "" {
			// A rejected line takes its custom_id in the output
			// (--skip-invalid): a later line with it is a duplicate.
			if id := splitter.RejectedCustomID(cfg, l); id != "" {
				seen[id] = true
			}
			continue
		}
		var in sluice.InputLine
		if err := json.Unmarshal(l, &in); err != nil {
			t.Fatalf("line %d: ValidateLine accepted what encoding/json rejects: %v", i+1, err)
		}
		if seen[in.CustomID] {
			continue
		}
		seen[in.CustomID] = true
		var b struct {
			Model string `json:"model"`
		}
		json.Unmarshal(in.Body, &b)
		model := b.Model
		if model == "" {
			model = cfg.Model
		}
		if strings.HasPrefix(in.URL, "/ai/run/") {
			model = strings.TrimPrefix(in.URL, "/ai/run/")
		}
		out = append(out, inputLine{line: int64(i + 1), raw: string(bytes.Trim(l, " \t\r")),
			customID: in.CustomID, url: in.URL, model: model, body: in.Body})
	}
	return out
}

// checkPlan verifies every invariant of a committed plan against the
// input's valid lines.
func checkPlan(t testing.TB, r *run, want []inputLine) {
	t.Helper()
	cfg := r.cfg
	lim := cfg.Limits
	check.Fatal(t, fmt.Sprintf("requests: result, tracker; want the %d valid lines", len(want)), []int64{r.res.Requests, int64(len(r.requests))},
		int64(len(want)) == r.res.Requests, len(r.requests) == len(want))
	if len(r.chunks) != len(r.res.Chunks) {
		t.Fatalf("chunks: tracker %d, result %d", len(r.chunks), len(r.res.Chunks))
	}
	byLine := map[int64]inputLine{}
	for _, l := range want {
		byLine[l.line] = l
	}
	files := map[int64][]byte{}
	var total int64
	for i, c := range r.chunks {
		check.Error(t, fmt.Sprintf("chunk %d: id, attempt, state", i), c, c.ID == int64(i+1), c.Attempt == 1, c.State == sluice.ChunkPending)
		rc := r.res.Chunks[i]
		check.Error(t, fmt.Sprintf("chunk %d: result against tracker %+v", c.ID, c), rc, rc.ID == c.ID, rc.Bytes == c.Bytes, rc.Requests == c.Requests,
			rc.EstTokens == c.EstTokens, rc.Path == c.Path, rc.Bound == c.Bound)
		b := check.Try(os.ReadFile(filepath.Join(cfg.Dir, c.Path))).Must(t, "ReadFile")
		files[c.ID] = b
		total += c.Bytes
		if int64(len(b)) != c.Bytes {
			t.Errorf("chunk %d: file %d bytes, row says %d", c.ID, len(b), c.Bytes)
		}
		for _, b := range []struct {
			what     string
			max, got int64
		}{{"bytes", lim.MaxBatchBytes, c.Bytes}, {"requests", int64(lim.MaxBatchRequests), int64(c.Requests)}, {"tokens", lim.MaxBatchTokens, c.EstTokens}} {
			if b.max > 0 && b.got > b.max {
				t.Errorf("chunk %d: %d %s > limit %d", c.ID, b.got, b.what, b.max)
			}
		}
		env := sluice.CodecFor(cfg.Codec, c.URL).Envelope() // local: each chunk its family's
		if n := countItems(t, env, b); n != c.Requests {
			t.Errorf("chunk %d: file holds %d items, row says %d", c.ID, n, c.Requests)
		}
		if ext := filepath.Ext(c.Path); (len(env.Header) == 0) != (ext == ".jsonl") {
			t.Errorf("chunk %d: path %s", c.ID, c.Path)
		}
		switch c.Bound {
		case "bytes", "requests", "tokens", "end":
		default:
			t.Errorf("chunk %d: bound %q", c.ID, c.Bound)
		}
	}
	if total != r.res.Bytes {
		t.Errorf("result bytes %d, chunks sum %d", r.res.Bytes, total)
	}
	type key struct{ url, model string }
	groups := map[key][]int64{} // lines, in the order of the plan
	perChunk := map[int64][]sluice.Request{}
	for i, q := range r.requests {
		l, ok := byLine[q.Line]
		check.Fatal(t, fmt.Sprintf("request, want line %+v ordinal %d", l, i), q, ok, q.Ordinal == int64(i), q.CustomID == l.customID, q.Attempt == 1, q.State == sluice.RequestPending)
		if i > 0 && q.Line <= r.requests[i-1].Line {
			t.Fatalf("ordinals out of line order at %d", i)
		}
		perChunk[q.Chunk] = append(perChunk[q.Chunk], q)
	}
	chunkByID := map[int64]sluice.Chunk{}
	for _, c := range r.chunks {
		chunkByID[c.ID] = c
		qs := perChunk[c.ID]
		sort.Slice(qs, func(a, b int) bool { return qs[a].Index < qs[b].Index })
		if len(qs) != c.Requests {
			t.Fatalf("chunk %d: %d request rows, want %d", c.ID, len(qs), c.Requests)
		}
		var tok int64
		for i, q := range qs {
			l := byLine[q.Line]
			if q.Index != i {
				t.Fatalf("chunk %d: index %d at %d", c.ID, q.Index, i)
			}
			if l.url != c.URL || l.model != c.Model {
				t.Fatalf("chunk %d (%s %s) holds line %d (%s %s)", c.ID, c.URL, c.Model, q.Line, l.url, l.model)
			}
			tok += q.Tokens
			item := files[c.ID][q.Offset : q.Offset+int64(q.Length)]
			checkItem(t, cfg, item, l)
			groups[key{c.URL, c.Model}] = append(groups[key{c.URL, c.Model}], q.Line)
		}
		if tok != c.EstTokens {
			t.Errorf("chunk %d: est_tokens %d, rows sum %d", c.ID, c.EstTokens, tok)
		}
	}
	for k, lines := range groups {
		var in []int64
		for _, l := range want {
			if l.url == k.url && l.model == k.model {
				in = append(in, l.line)
			}
		}
		if fmt.Sprint(in) != fmt.Sprint(lines) {
			t.Errorf("group %v: chunks give lines %v, input has %v", k, lines, in)
		}
	}
}

// countItems parses a chunk file as the provider's body.
func countItems(t testing.TB, env sluice.Envelope, b []byte) int {
	t.Helper()
	if len(env.Header) == 0 {
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Fatalf("JSONL chunk does not end in a newline")
		}
		n := 0
		for _, l := range bytes.Split(b[:len(b)-1], []byte{'\n'}) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("JSONL chunk line %d: %v", n+1, err)
			}
			n++
		}
		return n
	}
	var body struct {
		Requests []json.RawMessage `json:"requests"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("chunk body: %v", err)
	}
	return len(body.Requests)
}

// checkItem compares a request's wire item with its input line.
func checkItem(t testing.TB, cfg splitter.Config, item []byte, l inputLine) {
	t.Helper()
	switch cfg.Codec.(type) {
	case provider.OpenAICodec:
		if cfg.Model == "" && string(item) != l.raw+"\n" {
			t.Fatalf("line %d: item %q, want the line", l.line, item)
		}
		var in sluice.InputLine
		if err := json.Unmarshal(item, &in); err != nil || in.CustomID != l.customID {
			t.Fatalf("line %d: item %q: %v", l.line, item, err)
		}
	case provider.AnthropicCodec:
		var it struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(item, &it); err != nil || it.CustomID != l.customID || !jsonEqual(it.Params, l.body) {
			t.Fatalf("line %d: item %s: %v", l.line, item, err)
		}
	case provider.CloudflareCodec:
		var it map[string]json.RawMessage
		if err := json.Unmarshal(item, &it); err != nil || string(it["external_reference"]) != fmt.Sprintf("%q", l.customID) {
			t.Fatalf("line %d: item %s: %v", l.line, item, err)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

func openaiCodec() sluice.Codec { return provider.Presets["openai"].Codec() }
