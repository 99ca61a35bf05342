package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Money through the real binary (docs/money.md): plan's cost estimate,
// run --max-cost, status, and reuse of answers across jobs, against
// `sluice emulate`.

// chatLine is a chat request with a body unique to body.
func chatLine(id, model, text string, maxTokens int) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}}`,
		id, model, maxTokens, text)
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	writeFile(t, path, []byte(strings.Join(lines, "\n")+"\n"))
}

// outputByID reads an output file into raw lines by custom_id.
func outputByID(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var o struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		m[o.CustomID] = l
	}
	return m
}

// response is the output line after its custom_id: the provider's answer.
func response(t *testing.T, line string) string {
	t.Helper()
	i := strings.Index(line, `"response":`)
	if i < 0 {
		t.Fatalf("no response in %q", line)
	}
	return line[i:]
}

// TestReuseAcrossJobsBuysOnlyNewBodies: a second job whose file holds the
// first one's bodies under other custom_ids, plus new ones, buys only the
// new bodies (the emulator's requests_processed grows by exactly their
// count), and writes the reused answers byte for byte; a file grown by
// 10% and run as a new job buys exactly that 10%; --reuse=false buys
// everything again; within one job identical bodies are never collapsed.
func TestReuseAcrossJobsBuysOnlyNewBodies(t *testing.T) {
	t.Parallel() // its own emulator and state directory
	emu := startEmulator(t)
	dir := t.TempDir()
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	run := func(in, out string, args ...string) result {
		t.Helper()
		r := runSluice(t, env, append([]string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "15", "--poll-interval", "20ms", "--max-poll-interval", "100ms", "--rate", "-1"}, args...)...)
		if r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", in, r.code, r.stderr)
		}
		return r
	}
	processed := func() int64 { return emu.stats(t)["requests_processed"] }

	var a, b []string
	for i := 0; i < 50; i++ {
		model := "gpt-4o-mini"
		if i%2 == 1 {
			model = "gpt-4.1-nano"
		}
		a = append(a, chatLine(fmt.Sprintf("a-%d", i), model, fmt.Sprintf("question number %d", i), 20))
		b = append(b, chatLine(fmt.Sprintf("b-%d", 49-i), model, fmt.Sprintf("question number %d", i), 20))
	}
	for i := 0; i < 5; i++ {
		b = append(b, chatLine(fmt.Sprintf("b-new-%d", i), "gpt-4o-mini", fmt.Sprintf("a new question %d", i), 20))
	}
	aIn, bIn := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	writeLines(t, aIn, a)
	writeLines(t, bIn, b)
	aOut, bOut := filepath.Join(dir, "a.out.jsonl"), filepath.Join(dir, "b.out.jsonl")
	run(aIn, aOut)
	if n := processed(); n != 50 {
		t.Fatalf("job a: %d requests processed, want 50", n)
	}
	r := run(bIn, bOut)
	if n := processed(); n != 55 {
		t.Fatalf("job b: requests processed went to %d, want 55 (only its 5 new bodies bought)", n)
	}
	if !strings.Contains(r.stdout, "reused: 50 requests answered from earlier jobs' results") || !strings.Contains(r.stdout, "50 from job a-openai-") {
		t.Errorf("summary does not say what was reused and from which job:\n%s", r.stdout)
	}
	ao, bo := outputByID(t, aOut), outputByID(t, bOut)
	if len(bo) != 55 {
		t.Fatalf("b's output has %d lines, want 55", len(bo))
	}
	for i := 0; i < 50; i++ {
		src, dst := ao[fmt.Sprintf("a-%d", i)], bo[fmt.Sprintf("b-%d", 49-i)]
		if response(t, src) != response(t, dst) {
			t.Fatalf("b-%d's answer is not a-%d's byte for byte:\n%s\n%s", 49-i, i, src, dst)
		}
		if !strings.HasPrefix(dst, fmt.Sprintf(`{"custom_id":"b-%d",`, 49-i)) {
			t.Fatalf("reused line keeps the old custom_id: %s", dst)
		}
	}
	// b's output is in b's input order.
	checkOutput(t, bOut, customIDs(t, []byte(strings.Join(b, "\n"))))

	// The first file grown by 10% and run as a new job: exactly 5 bought.
	grown := append(append([]string{}, a...), chatLine("a-50", "gpt-4o-mini", "grown 1", 20), chatLine("a-51", "gpt-4o-mini", "grown 2", 20),
		chatLine("a-52", "gpt-4.1-nano", "grown 3", 20), chatLine("a-53", "gpt-4o-mini", "grown 4", 20), chatLine("a-54", "gpt-4.1-nano", "grown 5", 20))
	writeLines(t, aIn, grown)
	before := processed()
	run(aIn, filepath.Join(dir, "grown.out.jsonl"), "--job", "a-grown")
	if n := processed() - before; n != 5 {
		t.Errorf("the file grown by 5 lines bought %d requests, want 5", n)
	}

	// --reuse=false buys everything again.
	cIn := filepath.Join(dir, "c.jsonl")
	writeLines(t, cIn, b)
	before = processed()
	r = run(cIn, filepath.Join(dir, "c.out.jsonl"), "--reuse=false")
	if n := processed() - before; n != 55 {
		t.Errorf("--reuse=false bought %d requests, want all 55", n)
	}
	if strings.Contains(r.stdout, "reused:") {
		t.Errorf("--reuse=false summary mentions reuse:\n%s", r.stdout)
	}

	// Within one job, identical bodies are never collapsed: four copies of
	// a new body are four purchases, four answers. A later job of the same
	// four copies reuses the four answers, copy for copy; one of five
	// copies buys only the fifth.
	var same []string
	for i := 0; i < 4; i++ {
		same = append(same, chatLine(fmt.Sprintf("s-%d", i), "gpt-4o-mini", "tell me a random story", 20))
	}
	sIn, tIn, uIn := filepath.Join(dir, "s.jsonl"), filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "u.jsonl")
	writeLines(t, sIn, same)
	writeLines(t, tIn, same)
	writeLines(t, uIn, append(append([]string{}, same...), chatLine("s-4", "gpt-4o-mini", "tell me a random story", 20)))
	before = processed()
	run(sIn, filepath.Join(dir, "s.out.jsonl"))
	if n := processed() - before; n != 4 {
		t.Errorf("four identical bodies in one job bought %d, want 4", n)
	}
	so := outputByID(t, filepath.Join(dir, "s.out.jsonl"))
	distinct := map[string]bool{}
	for _, l := range so {
		distinct[response(t, l)] = true
	}
	if len(distinct) != 4 {
		t.Errorf("four copies got %d distinct answers, want 4 (each bought on its own)", len(distinct))
	}
	before = processed()
	run(tIn, filepath.Join(dir, "t.out.jsonl"))
	if n := processed() - before; n != 0 {
		t.Errorf("the same four copies in a later job bought %d, want 0", n)
	}
	to := outputByID(t, filepath.Join(dir, "t.out.jsonl"))
	for id, l := range to {
		if response(t, l) != response(t, so[id]) {
			t.Errorf("copy %s: not the answer of the same copy in the first job", id)
		}
	}
	before = processed()
	run(uIn, filepath.Join(dir, "u.out.jsonl"))
	if n := processed() - before; n != 1 {
		t.Errorf("five copies after four bought %d, want 1", n)
	}
	if n := emu.stats(t)["requests_processed_more_than_once"]; n != 0 {
		t.Errorf("%d requests executed twice within a job", n)
	}
}

// planDocJSON is the part of plan --json the money tests read.
type planDocJSON struct {
	EstCost     *float64 `json:"est_cost_usd"`
	MaxCost     *float64 `json:"max_cost_usd"`
	PriceSource string   `json:"price_source"`
	Unpriced    []string `json:"unpriced_models"`
	Chunks      []struct {
		Model     string   `json:"model"`
		EstTokens int64    `json:"est_tokens"`
		MaxOut    int64    `json:"max_output_tokens"`
		NoMax     int      `json:"no_max_requests"`
		EstCost   *float64 `json:"est_cost_usd"`
		MaxCost   *float64 `json:"max_cost_usd"`
	} `json:"chunks"`
	Learned map[string]struct {
		InputRatio  *float64 `json:"input_ratio"`
		OutputRatio *float64 `json:"output_ratio"`
	} `json:"learned"`
}

func planJSONOf(t *testing.T, env []string, args ...string) planDocJSON {
	t.Helper()
	r := runSluice(t, env, append([]string{"plan", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	var d planDocJSON
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, r.stdout)
	}
	return d
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }

// TestPlanCostAgainstHandComputed: plan prices each chunk from the
// built-in table (gpt-4o-mini batch: $0.075 in, $0.30 out per million),
// with max_tokens as the output; an unknown model is unknown, not $0; a
// --prices file prices it; after a run, the lessons of its batches
// correct the next plan.
func TestPlanCostAgainstHandComputed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := stateEnv(dir)
	in, _ := writeRequests(t, filepath.Join(dir, "in.jsonl"), 30, func(i int) (string, string) {
		id := fmt.Sprintf("p-%d", i)
		return id, chatLine(id, "gpt-4o-mini", strings.Repeat("word ", 10+i), 10+i)
	})
	d := planJSONOf(t, env, in, "--max-batch-requests", "10")
	if len(d.Chunks) != 3 || d.EstCost == nil || d.PriceSource != "built-in" {
		t.Fatalf("plan: %+v", d)
	}
	total := 0.0
	for k, c := range d.Chunks {
		// max_tokens 10+i over the chunk's ten requests.
		wantMax := int64(0)
		for i := 10 * k; i < 10*k+10; i++ {
			wantMax += int64(10 + i)
		}
		if c.MaxOut != wantMax || c.NoMax != 0 {
			t.Errorf("chunk %d: max output %d (%d without), want %d", k+1, c.MaxOut, c.NoMax, wantMax)
		}
		want := float64(c.EstTokens)*0.075/1e6 + float64(wantMax)*0.30/1e6
		wantMost := math.Ceil(float64(c.EstTokens)*1.25)*0.075/1e6 + float64(wantMax)*0.30/1e6
		if c.EstCost == nil || !near(*c.EstCost, want) || c.MaxCost == nil || !near(*c.MaxCost, wantMost) {
			t.Errorf("chunk %d: est %v max %v, want %v and %v", k+1, c.EstCost, c.MaxCost, want, wantMost)
		}
		total += want
	}
	if !near(*d.EstCost, total) {
		t.Errorf("total %v, want %v", *d.EstCost, total)
	}

	// An unknown model: unknown, said plainly.
	unk := filepath.Join(dir, "unk.jsonl")
	writeLines(t, unk, []string{chatLine("u", "my-finetune", "hi", 5)})
	r := runSluice(t, env, "plan", unk)
	if r.code != 0 || !strings.Contains(r.stdout, "estimated cost: unknown: no price for my-finetune") || strings.Contains(r.stdout, "$0.000000") {
		t.Errorf("unknown model: exit %d\n%s", r.code, r.stdout)
	}
	if d := planJSONOf(t, env, unk); d.EstCost != nil || d.Chunks[0].EstCost != nil || len(d.Unpriced) != 1 {
		t.Errorf("unknown model in --json: %+v", d)
	}
	prices := filepath.Join(dir, "prices.yaml")
	writeFile(t, prices, []byte("providers:\n  local:\n    models:\n      my-finetune: {input: 2, output: 8}\n"))
	unk2 := filepath.Join(dir, "unk2.jsonl")
	writeLines(t, unk2, []string{chatLine("u", "my-finetune", "hi", 5)})
	if d := planJSONOf(t, env, unk2, "--prices", prices); d.EstCost == nil || !near(*d.EstCost, float64(d.Chunks[0].EstTokens)*2/1e6+5*8/1e6) {
		t.Errorf("priced by --prices: %+v", d)
	}

	// Run the first file: its batches teach the input and output ratios,
	// which correct the plan of a new file of the same model.
	r = runSluice(t, env, "run", in, "--out", filepath.Join(dir, "out.jsonl"), "--max-batch-requests", "10")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "reported by the provider (x") || !strings.Contains(r.stdout, "spend: $") {
		t.Errorf("summary without estimate vs actual and spend:\n%s", r.stdout)
	}
	in2, _ := writeRequests(t, filepath.Join(dir, "in2.jsonl"), 10, func(i int) (string, string) {
		id := fmt.Sprintf("m-%d", i)
		return id, chatLine(id, "gpt-4o-mini", strings.Repeat("other ", 20+i), 500)
	})
	d = planJSONOf(t, env, in2)
	l, ok := d.Learned["gpt-4o-mini"]
	if !ok || l.InputRatio == nil || l.OutputRatio == nil {
		t.Fatalf("no lesson for gpt-4o-mini after a run: %+v", d.Learned)
	}
	c := d.Chunks[0]
	expIn := math.Round(float64(c.EstTokens) * *l.InputRatio)
	expOut := math.Min(math.Round(expIn**l.OutputRatio), 5000)
	if want := expIn*0.075/1e6 + expOut*0.30/1e6; c.EstCost == nil || !near(*c.EstCost, want) {
		t.Errorf("learned estimate %v, want %v (in %v out %v)", c.EstCost, want, expIn, expOut)
	}
}

// TestMaxCostThroughBinary: a run under a small cap exits 3 with the
// committed spend, status shows spend and cap, a run with a higher cap
// finishes without buying anything twice; a cap over an unpriced model is
// refused before any work.
func TestMaxCostThroughBinary(t *testing.T) {
	t.Parallel() // its own emulator and state directory
	emu := startEmulator(t, "--batch-time", "50ms")
	dir := t.TempDir()
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	var lines []string
	var ids []string
	for i := 0; i < 40; i++ {
		ids = append(ids, fmt.Sprintf("c-%d", i))
		lines = append(lines, chatLine(ids[i], "gpt-4o-mini", fmt.Sprintf("cap question %d", i), 100))
	}
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	writeLines(t, in, lines)
	args := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "5", "--poll-interval", "20ms", "--max-poll-interval", "100ms", "--rate", "-1"}
	// Each chunk's upper bound is about 5 x 100 x $0.30/M = $0.00015 and
	// it costs about $0.00001 once done: a cap of $0.0002 admits one chunk
	// at a time, until what was spent leaves no room for another.
	r := runSluice(t, env, append(args, "--max-cost", "0.0002")...)
	if r.code != 3 || !strings.Contains(r.stderr, "spend cap reached: $") || !strings.Contains(r.stderr, "committed of $0.000200") {
		t.Fatalf("capped run: exit %d\n%s", r.code, r.stderr)
	}
	got := emu.stats(t)["requests_processed"]
	if got == 0 || got == 40 {
		t.Fatalf("capped run bought %d of 40 requests", got)
	}
	st := runSluice(t, env, "status", "--json")
	var doc struct {
		Jobs []struct {
			Money struct {
				Actual    *float64 `json:"actual_usd"`
				Committed *float64 `json:"committed_usd"`
				Cap       *float64 `json:"cap_usd"`
				Ratio     *float64 `json:"input_ratio"`
			} `json:"money"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &doc); err != nil || len(doc.Jobs) != 1 {
		t.Fatalf("status --json: %v\n%s", err, st.stdout)
	}
	m := doc.Jobs[0].Money
	if m.Actual == nil || m.Committed == nil || m.Cap == nil || *m.Cap != 0.0002 || *m.Actual <= 0 || *m.Actual > 0.0002 || m.Ratio == nil {
		t.Errorf("status money: %+v", m)
	}
	if txt := runSluice(t, env, "status"); !strings.Contains(txt.stdout, "spend:") || !strings.Contains(txt.stdout, "cap $0.000200") {
		t.Errorf("status text without spend and cap:\n%s", txt.stdout)
	}
	r = runSluice(t, env, append(args, "--max-cost", "5")...)
	if r.code != 0 {
		t.Fatalf("run with a higher cap: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	s := emu.stats(t)
	if s["requests_processed"] != 40 || s["requests_processed_more_than_once"] != 0 {
		t.Errorf("after both runs: %v; want 40 processed, none twice", s)
	}

	// A cap over a model without a price: refused, nothing submitted.
	unk := filepath.Join(dir, "unk.jsonl")
	writeLines(t, unk, []string{chatLine("u", "my-finetune", "hi", 5)})
	r = runSluice(t, env, "run", unk, "--out", filepath.Join(dir, "unk.out"), "--provider", "openai", "--max-cost", "1")
	if r.code != 2 || !strings.Contains(r.stderr, `no price for model "my-finetune"`) {
		t.Errorf("cap with unknown price: exit %d\n%s", r.code, r.stderr)
	}
	if n := emu.stats(t)["requests_processed"]; n != 40 {
		t.Errorf("the refused run bought something: %d processed", n)
	}
}
