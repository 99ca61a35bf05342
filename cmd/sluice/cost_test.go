package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestNativeGeminiCostBounded: 60 native Gemini lines that bound their
// output with generationConfig.maxOutputTokens are planned at the cost of
// the same requests written as chat completions lines (within 10%), not
// at the model's 65,536-token ceiling, and a run under --max-cost 1 sends
// them all and ends 0, at a provider gemini against sluice emulate and at
// the local provider (which prices them as Gemini's).
func TestNativeGeminiCostBounded(t *testing.T) {
	t.Parallel() // its own emulator and state directory
	emu := startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=gm-cost"}, "--batch-time", "100ms")
	dir := t.TempDir()
	var native, chat []string
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("g-%03d", i)
		ids = append(ids, id)
		text := fmt.Sprintf("question %d: name three rivers of Europe and the seas they reach", i)
		native = append(native, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1beta/models/gemini-2.5-flash:generateContent",`+
			`"body":{"contents":[{"role":"user","parts":[{"text":%q}]}],"generationConfig":{"maxOutputTokens":64}}}`, id, text))
		chat = append(chat, chatLine(id, "gemini-2.5-flash", text, 64))
	}
	nativeIn, chatIn := filepath.Join(dir, "native.jsonl"), filepath.Join(dir, "chat.jsonl")
	writeLines(t, nativeIn, native)
	writeLines(t, chatIn, chat)
	env := append(stateEnv(dir), geminiEnv(emu.addr, "gm-cost")...)
	dn := planJSONOf(t, env, nativeIn, "--provider", "gemini")
	dc := planJSONOf(t, env, chatIn, "--provider", "gemini")
	if dn.EstCost == nil || dn.MaxCost == nil || dc.EstCost == nil || dc.MaxCost == nil {
		t.Fatalf("plan without a bounded cost: native %+v, chat %+v", dn, dc)
	}
	for _, p := range [][3]any{{"estimate", *dn.EstCost, *dc.EstCost}, {"upper bound", *dn.MaxCost, *dc.MaxCost}} {
		a, b := p[1].(float64), p[2].(float64)
		if math.Abs(a-b) > 0.1*math.Max(a, b) {
			t.Errorf("%s: native $%g, chat $%g: more than 10%% apart", p[0], a, b)
		}
	}
	// 60 x 64 output tokens at $1.25 per million, and a little input.
	if *dn.MaxCost > 0.01 {
		t.Errorf("native lines planned at up to $%g", *dn.MaxCost)
	}
	out := filepath.Join(dir, "out.jsonl")
	r := runSluice(t, env, "run", nativeIn, "--out", out, "--provider", "gemini", "--max-cost", "1",
		"--poll-interval", "20ms", "--max-poll-interval", "100ms", "--rate", "-1")
	if r.code != 0 || strings.Contains(r.stderr, "spend cap") {
		t.Fatalf("run --max-cost 1: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	if g := emu.familyStats(t, "gemini"); g["requests_processed"] != 60 {
		t.Errorf("emulator gemini stats: %v", g)
	}

	// The local provider runs them too, priced as Gemini's (it was no
	// price, so --max-cost refused them).
	dl := planJSONOf(t, env, nativeIn, "--provider", "local")
	if dl.EstCost == nil || dl.MaxCost == nil || math.Abs(*dl.MaxCost-*dn.MaxCost) > 1e-9 {
		t.Errorf("local plan: est %v max %v, want gemini's $%g", dl.EstCost, dl.MaxCost, *dn.MaxCost)
	}
	localOut := filepath.Join(dir, "local.jsonl")
	r = runSluice(t, env, "run", nativeIn, "--out", localOut, "--provider", "local", "--max-cost", "1", "--reuse=false")
	if r.code != 0 {
		t.Fatalf("run --provider local --max-cost 1: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, localOut, ids)
}
