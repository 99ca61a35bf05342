package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/emutest"
)

// chatCompletion is what these tests read of an OpenAI chat.completion
// (that the OpenAI SDK itself parses translated answers is checked in the
// nested module sdktest/, sdktest/translate).
type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// writeChatInput writes n OpenAI chat completions lines in seven shapes
// (system prompt, multi-turn, image by data URI, tools with a tool call and
// its result, JSON mode, JSON schema, a forced tool call; stop sequences
// and tool_choice "required" when required is true, tool_choice "none"
// otherwise, as Workers AI takes neither),
// each ending with the user message "q <i> ..." the emulator's fake model
// echoes, and returns the path, the custom_ids and each line's last user
// message.
func writeChatInput(t *testing.T, dir string, n int, required bool) (string, []string, []string) {
	t.Helper()
	p := filepath.Join(dir, "chat.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	ids := make([]string, n)
	lasts := make([]string, n)
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup", "description": "look a word up",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"word": map[string]any{"type": "string"}}}}}}
	for i := 0; i < n; i++ {
		ids[i] = fmt.Sprintf("chat-%05d", i)
		lasts[i] = fmt.Sprintf("q %d: what is \"%d\" squared?", i, i)
		user := map[string]any{"role": "user", "content": lasts[i]}
		body := map[string]any{"model": "gpt-4o-mini", "max_tokens": 64}
		var msgs []any
		switch i % 7 {
		case 0:
			msgs = []any{map[string]any{"role": "system", "content": "Answer briefly."}, user}
			body["temperature"] = 0.3
		case 1:
			msgs = []any{map[string]any{"role": "user", "content": "Hello."}, map[string]any{"role": "assistant", "content": "Hi! Ask away."}, user}
			body["max_completion_tokens"], body["max_tokens"] = 64, nil
		case 2:
			msgs = []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": lasts[i]},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}}}}}
		case 3:
			msgs = []any{map[string]any{"role": "user", "content": "Look up 'sluice'."},
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function",
					"function": map[string]any{"name": "lookup", "arguments": `{"word":"sluice"}`}}}},
				map[string]any{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d", i), "content": "a gate for water"}, user}
			body["tools"] = tools
		case 4:
			msgs = []any{map[string]any{"role": "system", "content": "Answer in JSON."}, user}
			body["response_format"] = map[string]any{"type": "json_object"}
		case 5:
			msgs = []any{user}
			body["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer",
				"schema": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}}}
			body["top_p"] = 0.9
			if required {
				body["stop"] = []string{"END"}
			}
		case 6:
			msgs = []any{user}
			body["tools"] = tools
			body["tool_choice"] = "none"
			if required {
				body["tool_choice"] = "required"
			}
		}
		body["messages"] = msgs
		line, _ := json.Marshal(map[string]any{"custom_id": ids[i], "method": "POST", "url": "/v1/chat/completions", "body": body})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p, ids, lasts
}

func mustJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestChatLinesOnAnyProvider runs one 2,000-line OpenAI chat completions
// file to completion with --provider anthropic, cloudflare, gemini,
// mistral and together
// against `sluice emulate`, from fresh state directories, with
// --model-map: every output line must carry a chat.completion the OpenAI
// SDK parses, answering that line's last user message (so the translated
// request reached the fake model whole), from the mapped model, with usage.
func TestChatLinesOnAnyProvider(t *testing.T) {
	t.Parallel() // its own emulator and state directory
	emu := startEmulator(t, "--batch-time", "200ms")
	for _, c := range []struct {
		provider, model string
		env             []string
		// required: the family takes tool_choice "required" and stop
		// sequences (Workers AI takes neither); the forced tool's call
		// comes back.
		required bool
		// usage: the family's answers count tokens, so the
		// chat.completion's usage is checked.
		usage bool
	}{
		{"anthropic", "claude-haiku-4-5", []string{"ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://" + emu.addr}, true, true},
		{"cloudflare", "@cf/meta/llama-3.3-70b-instruct-fp8-fast", []string{"CLOUDFLARE_API_TOKEN=cf-test", "CLOUDFLARE_ACCOUNT_ID=acct1",
			"CLOUDFLARE_BASE_URL=http://" + emu.addr + "/client/v4"}, false, false},
		{"gemini", "gemini-2.5-flash", geminiEnv(emu.addr, "gm-test"), true, true},
		{"mistral", "mistral-small-latest", familyEnv("mistral", "k", emu.addr), true, true},
		{"together", "meta-llama/Llama-3.3-70B-Instruct-Turbo", familyEnv("together", "k", emu.addr), true, true},
	} {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel() // its own state directory; the emulator serves every family at once
			dir := t.TempDir()
			in, ids, lasts := writeChatInput(t, dir, 2_000, c.required)
			out := filepath.Join(dir, "out.jsonl")
			r := runSluice(t, c.env, "run", in, "--out", out, "--provider", c.provider, "--state", filepath.Join(dir, "state"),
				"--model-map", "gpt-4o-mini="+c.model, "--max-batch-requests", "800",
				"--poll-interval", "50ms", "--max-poll-interval", "200ms", "--rate", "-1")
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			lines := checkOutput(t, out, ids)
			for i, o := range lines {
				if o.Response == nil || o.Response.StatusCode != 200 {
					t.Fatalf("%s: %+v, want a 200", o.CustomID, o)
				}
				var cc chatCompletion
				if err := json.Unmarshal(o.Response.Body, &cc); err != nil {
					t.Fatalf("%s: not a chat.completion body: %v\n%s", o.CustomID, err, o.Response.Body)
				}
				if cc.Object != "chat.completion" || cc.ID == "" || cc.Created == 0 || len(cc.Choices) != 1 {
					t.Fatalf("%s: not a chat.completion: %s", o.CustomID, o.Response.Body)
				}
				ch := cc.Choices[0]
				if i%7 == 6 && c.required {
					// The forced tool is called: a tool call comes back.
					tc := ch.Message.ToolCalls
					if ch.FinishReason != "tool_calls" || len(tc) != 1 || tc[0].Function.Name != "lookup" || tc[0].ID == "" ||
						tc[0].Function.Arguments != `{"echo":`+mustJSONString(emutest.ExpectedAnswer(lasts[i]))+`}` {
						t.Fatalf("%s: want a lookup tool call, got %s", o.CustomID, o.Response.Body)
					}
					continue
				}
				if ch.Message.Role != "assistant" || ch.FinishReason != "stop" {
					t.Fatalf("%s: choice %+v", o.CustomID, ch)
				}
				got := ch.Message.Content
				if i%7 == 4 || i%7 == 5 {
					// JSON mode: the emulator answers {"echo": …} (through
					// the forced response-format tool on Anthropic, as a
					// JSON value on Workers AI, as JSON text on Gemini,
					// Mistral and Together); the content is its JSON.
					var js struct{ Echo string }
					if err := json.Unmarshal([]byte(got), &js); err != nil {
						t.Fatalf("%s: JSON mode content %q is not JSON: %v", o.CustomID, got, err)
					}
					got = js.Echo
				}
				if want := emutest.ExpectedAnswer(lasts[i]); got != want {
					t.Fatalf("%s: content %q, want %q (the translated request lost its last user message)", o.CustomID, ch.Message.Content, want)
				}
				if cc.Model != c.model {
					t.Fatalf("%s: model %q, want the mapped %q", o.CustomID, cc.Model, c.model)
				}
				if c.usage && (cc.Usage.PromptTokens == 0 || cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens) {
					t.Fatalf("%s: usage %+v", o.CustomID, cc.Usage)
				}
			}
		})
	}
}

// TestChatLineRejectedAtPlanTime: a chat line with a parameter the target
// cannot honour stops the plan with file:line: reason and exit 2, or goes
// to the rejects file with --skip-invalid while the others run; a
// parameter that cannot change the answer is dropped with one warning.
func TestChatLineRejectedAtPlanTime(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	good := `{"custom_id":"g%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":8,"store":true,"messages":[{"role":"user","content":"hi"}]}}` + "\n"
	bad := `{"custom_id":"b1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":8,"logit_bias":{"50256":-100},"messages":[{"role":"user","content":"hi"}]}}` + "\n"
	writeFile(t, in, []byte(fmt.Sprintf(good, 1)+fmt.Sprintf(good, 2)+bad+fmt.Sprintf(good, 3)))
	env := append(stateEnv(dir), "ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://127.0.0.1:1")
	r := runSluice(t, env, "plan", in, "--provider", "anthropic")
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s", r.code, r.stderr)
	}
	if want := "in.jsonl:3"; !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "body.logit_bias: anthropic has no logit bias") {
		t.Fatalf("stderr does not name %s and the reason:\n%s", want, r.stderr)
	}
	rejects := filepath.Join(dir, "rejects.jsonl")
	r = runSluice(t, env, "plan", in, "--provider", "anthropic", "--skip-invalid", "--rejects", rejects, "--json")
	if r.code != 0 {
		t.Fatalf("--skip-invalid: exit %d\n%s", r.code, r.stderr)
	}
	var plan struct{ Requests, Rejected int64 }
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || plan.Requests != 3 || plan.Rejected != 1 {
		t.Fatalf("plan %+v (%v)\n%s", plan, err, r.stdout)
	}
	rj, _ := os.ReadFile(rejects)
	if !strings.Contains(string(rj), `"b1"`) || !strings.Contains(string(rj), "logit_bias") {
		t.Fatalf("rejects file: %s", rj)
	}
	if n := strings.Count(r.stderr, "body.store"); n != 1 || !strings.Contains(r.stderr, `"lines":3`) {
		t.Fatalf("want one warning about body.store on 3 lines, stderr:\n%s", r.stderr)
	}

	// Anthropic needs max_tokens: a line without one is refused, unless
	// --default-max-tokens gives it one.
	in2 := filepath.Join(dir, "nomax.jsonl")
	writeFile(t, in2, []byte(`{"custom_id":"n1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`+"\n"))
	r = runSluice(t, env, "plan", in2, "--provider", "anthropic")
	if r.code != 2 || !strings.Contains(r.stderr, "nomax.jsonl:1") || !strings.Contains(r.stderr, "body.max_tokens") {
		t.Fatalf("without max_tokens: exit %d\n%s", r.code, r.stderr)
	}
	r = runSluice(t, env, "plan", in2, "--provider", "anthropic", "--default-max-tokens", "256", "--json")
	if r.code != 0 {
		t.Fatalf("--default-max-tokens: exit %d\n%s", r.code, r.stderr)
	}
}

// TestNativeLinesUntouched: with --provider anthropic, /v1/messages lines
// beside chat lines are never translated: their answers come back as
// Anthropic Messages, while the chat line's comes back a chat.completion.
func TestNativeLinesUntouched(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulator(t, "--batch-time", "100ms")
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeFile(t, in, []byte(`{"custom_id":"native1","method":"POST","url":"/v1/messages","body":{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"native"}]}}
{"custom_id":"chat1","method":"POST","url":"/v1/chat/completions","body":{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"chat"}]}}
`))
	env := []string{"ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://" + emu.addr}
	out := filepath.Join(dir, "out.jsonl")
	r := runSluice(t, env, "run", in, "--out", out, "--provider", "anthropic", "--state", filepath.Join(dir, "state"),
		"--poll-interval", "50ms", "--rate", "-1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := checkOutput(t, out, []string{"native1", "chat1"})
	var native struct{ Type, Role string }
	json.Unmarshal(lines[0].Response.Body, &native)
	if native.Type != "message" {
		t.Fatalf("the native line's answer was changed: %s", lines[0].Response.Body)
	}
	var cc struct{ Object string }
	json.Unmarshal(lines[1].Response.Body, &cc)
	if cc.Object != "chat.completion" {
		t.Fatalf("the chat line's answer was not translated: %s", lines[1].Response.Body)
	}
}

// TestChatLinesSurviveSIGKILL: chat lines on --provider anthropic, the run
// SIGKILLed at random moments and run again each time: in the end every
// line has a chat.completion answering it, and no request ran twice at
// the provider. (Translation is done when chunks are written and when
// results are read, both of which a rerun repeats from what is on disk.)
func TestChatLinesSurviveSIGKILL(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulator(t, "--batch-time", "800ms", "--slow-rate", "0.3", "--slow-delay", "100ms", "--seed", "5")
	dir := t.TempDir()
	in, ids, lasts := writeChatInput(t, dir, 240, true)
	env := []string{"ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://" + emu.addr}
	out := filepath.Join(dir, "out.jsonl")
	args := []string{"run", in, "--out", out, "--provider", "anthropic", "--model-map", "gpt-4o-mini=claude-haiku-4-5",
		"--max-batch-requests", "12", "--poll-interval", "20ms", "--max-poll-interval", "80ms", "--rate", "-1",
		"--reconcile-grace", "1s", "--state", filepath.Join(dir, "state")}
	kills := killRuns(t, func() *exec.Cmd { return sluiceCmd(env, args...) }, 15, randomDelays(rand.New(rand.NewPCG(3, 4))))
	if kills < 5 {
		t.Fatalf("only %d kills landed", kills)
	}
	if r := runSluice(t, env, args...); r.code != 0 {
		t.Fatalf("final run: exit %d\n%s", r.code, r.stderr)
	}
	for i, o := range checkOutput(t, out, ids) {
		var cc chatCompletion
		if o.Response == nil || o.Response.StatusCode != 200 || json.Unmarshal(o.Response.Body, &cc) != nil ||
			cc.Object != "chat.completion" || len(cc.Choices) != 1 {
			t.Fatalf("%s: not a chat.completion: %+v", o.CustomID, o)
		}
		if i%7 == 6 || i%7 == 4 || i%7 == 5 {
			continue // tool call and JSON answers: TestChatLinesOnAnyProvider reads them
		}
		if want := emutest.ExpectedAnswer(lasts[i]); cc.Choices[0].Message.Content != want {
			t.Fatalf("%s: content %q, want %q", o.CustomID, cc.Choices[0].Message.Content, want)
		}
	}
	if n := emu.stats(t)["requests_processed_more_than_once"]; n != 0 {
		t.Fatalf("%d requests processed more than once after %d kills", n, kills)
	}
	t.Logf("%d kills", kills)
}
