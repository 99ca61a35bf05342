package provider

import (
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/translate"
)

func chatItem(id, body string) *sluice.Item {
	raw := `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":` + body + `}`
	return &sluice.Item{Line: 7, CustomID: id, URL: ChatURL, Model: gjson.Get(body, "model").String(),
		Body: []byte(body), Raw: []byte(raw)}
}

func TestParseModelMap(t *testing.T) {
	m, err := ParseModelMap(" gpt-4o-mini = claude-haiku-4-5 ,gpt-4o=claude-sonnet-4-5,")
	if err != nil || len(m) != 2 || m["gpt-4o-mini"] != "claude-haiku-4-5" || m["gpt-4o"] != "claude-sonnet-4-5" {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"a", "a=", "=b", "a=b,a=c"} {
		if _, err := ParseModelMap(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPlanCodecModelMap: the map renames chat lines' models on every
// family, and leaves native lines and unmapped models alone.
func TestPlanCodecModelMap(t *testing.T) {
	mm := map[string]string{"gpt-4o-mini": "llama-3.1-8b-instant"}
	oc := Presets["groq"].PlanCodec(ChatOptions{ModelMap: mm})
	it := chatItem("a", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`)
	if err := oc.Validate(it); err != nil {
		t.Fatal(err)
	}
	out, err := oc.AppendItem(nil, it)
	if err != nil || gjson.GetBytes(out, "body.model").String() != "llama-3.1-8b-instant" || it.Model != "llama-3.1-8b-instant" {
		t.Fatalf("openai family: %s %v (model %q)", out, err, it.Model)
	}
	it = chatItem("b", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)
	oc.Validate(it)
	if out, _ := oc.AppendItem(nil, it); string(out) != string(it.Raw)+"\n" {
		t.Fatalf("an unmapped line was rewritten: %s", out)
	}
	if _, ok := Presets["groq"].PlanCodec(ChatOptions{}).(OpenAICodec); !ok {
		t.Fatal("without a map the OpenAI family's codec is not wrapped")
	}

	ac := Presets["anthropic"].PlanCodec(ChatOptions{ModelMap: map[string]string{"gpt-4o-mini": "claude-haiku-4-5"}})
	it = chatItem("c", `{"model":"gpt-4o-mini","max_tokens":9,"messages":[{"role":"system","content":"s"},{"role":"user","content":"x"}]}`)
	if err := ac.Validate(it); err != nil {
		t.Fatal(err)
	}
	out, err = ac.AppendItem(nil, it)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"custom_id":"c","params":{"model":"claude-haiku-4-5","max_tokens":9,"system":"s","messages":[{"role":"user","content":"x"}]}}`
	if string(out) != want {
		t.Fatalf("anthropic item\n got %s\nwant %s", out, want)
	}
	if it.URL != ChatURL {
		t.Fatalf("the line's url became %q: its chunk would not be translated back", it.URL)
	}
	native := &sluice.Item{CustomID: "n", URL: "/v1/messages", Model: "gpt-4o-mini",
		Body: []byte(`{"model":"gpt-4o-mini","max_tokens":3,"messages":[]}`)}
	ac.Validate(native)
	if out, _ := ac.AppendItem(nil, native); !strings.Contains(string(out), `"model":"gpt-4o-mini"`) {
		t.Fatalf("a native line's model was mapped: %s", out)
	}

	cc := Presets["cloudflare"].PlanCodec(ChatOptions{})
	it = chatItem("d", `{"model":"@cf/meta/llama-3.1-8b-instruct","messages":[{"role":"user","content":"x"}]}`)
	if err := cc.Validate(it); err != nil {
		t.Fatal(err)
	}
	out, _ = cc.AppendItem(nil, it)
	if string(out) != `{"messages":[{"role":"user","content":"x"}],"external_reference":"d"}` || it.Model != "@cf/meta/llama-3.1-8b-instruct" {
		t.Fatalf("cloudflare item %s (model %q)", out, it.Model)
	}

	gc := Presets["gemini"].PlanCodec(ChatOptions{ModelMap: map[string]string{"gpt-4o-mini": "gemini-2.5-flash"}})
	it = chatItem("e", `{"model":"gpt-4o-mini","max_tokens":9,"messages":[{"role":"user","content":"x"}]}`)
	if err := gc.Validate(it); err != nil {
		t.Fatal(err)
	}
	out, _ = gc.AppendItem(nil, it)
	want = `{"key":"e","request":{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"maxOutputTokens":9}}}` + "\n"
	if string(out) != want || it.Model != "gemini-2.5-flash" || it.URL != ChatURL {
		t.Fatalf("gemini item\n got %s\nwant %s(model %q)", out, want, it.Model)
	}
	it = chatItem("f", `{"model":"tunedModels/mine","messages":[{"role":"user","content":"x"}]}`)
	if err := gc.Validate(it); err != nil || it.Model != "tunedModels/mine" {
		t.Fatalf("a tuned model: %v (model %q)", err, it.Model)
	}

	// Mistral and Together: the translated body (max_completion_tokens
	// renamed, the mapped model written) in a {custom_id, body} line.
	for _, c := range []struct{ preset, model string }{{"mistral", "mistral-small-latest"}, {"together", "meta-llama/Llama-3.3-70B-Instruct-Turbo"}} {
		pc := Presets[c.preset].PlanCodec(ChatOptions{ModelMap: map[string]string{"gpt-4o-mini": c.model}})
		it = chatItem("g", `{"model":"gpt-4o-mini","max_completion_tokens":9,"messages":[{"role":"user","content":"x"}]}`)
		if err := pc.Validate(it); err != nil {
			t.Fatalf("%s: %v", c.preset, err)
		}
		out, _ = pc.AppendItem(nil, it)
		if gjson.GetBytes(out, "custom_id").String() != "g" || gjson.GetBytes(out, "body.model").String() != c.model ||
			gjson.GetBytes(out, "body.max_tokens").Int() != 9 || gjson.GetBytes(out, "body.max_completion_tokens").Exists() ||
			gjson.GetBytes(out, "url").Exists() || it.URL != ChatURL {
			t.Fatalf("%s item %s", c.preset, out)
		}
	}
}

// TestPlanCodecWarnings: warnings reach ChatOptions.Warn with the line.
func TestPlanCodecWarnings(t *testing.T) {
	var mu sync.Mutex
	var got []string
	c := Presets["anthropic"].PlanCodec(ChatOptions{Warn: func(line int64, w translate.Warning) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, w.Param)
		if line != 7 {
			t.Errorf("warning on line %d, want 7", line)
		}
	}})
	it := chatItem("w", `{"model":"m","max_tokens":9,"store":true,"messages":[{"role":"user","content":"x"}]}`)
	if err := c.Validate(it); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "store" {
		t.Fatalf("warnings %v", got)
	}
}

// TestTranslateResult: answers of chat chunks come back as chat
// completions or OpenAI errors; an answer that does not translate fails
// for good; other chunks' results pass untouched.
func TestTranslateResult(t *testing.T) {
	rt := Presets["anthropic"].Codec().(sluice.ResultTranslator)
	chat := sluice.BatchRef{URL: ChatURL, Model: "claude-haiku-4-5"}
	ok := sluice.Result{CustomID: "a", Kind: sluice.ResultSucceeded, Line: sluice.OutputLine{CustomID: "a",
		Response: &sluice.Response{StatusCode: 200, Body: []byte(`{"id":"msg_1","type":"message","model":"claude-haiku-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`)}}}
	r := ok
	rt.TranslateResult(chat, &r)
	if b := r.Line.Response.Body; gjson.GetBytes(b, "object").String() != "chat.completion" || gjson.GetBytes(b, "choices.0.message.content").String() != "hi" {
		t.Fatalf("succeeded: %s", b)
	}
	if string(ok.Line.Response.Body) == string(r.Line.Response.Body) {
		t.Fatal("the caller's response was changed in place")
	}

	r = ok
	rt.TranslateResult(sluice.BatchRef{URL: "/v1/messages"}, &r)
	if gjson.GetBytes(r.Line.Response.Body, "type").String() != "message" {
		t.Fatalf("a native chunk's result was translated: %s", r.Line.Response.Body)
	}

	r = sluice.Result{CustomID: "e", Kind: sluice.ResultFailed, Line: sluice.OutputLine{CustomID: "e",
		Response: &sluice.Response{StatusCode: 400, Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`)}}}
	rt.TranslateResult(chat, &r)
	if b := r.Line.Response.Body; gjson.GetBytes(b, "error.message").String() != "bad" || gjson.GetBytes(b, "error.type").String() != "invalid_request_error" || r.Line.Response.StatusCode != 400 {
		t.Fatalf("error: %s", b)
	}

	r = sluice.Result{CustomID: "u", Kind: sluice.ResultSucceeded, Line: sluice.OutputLine{CustomID: "u",
		Response: &sluice.Response{StatusCode: 200, Body: []byte(`{"unexpected":true}`)}}}
	rt.TranslateResult(chat, &r)
	if r.Kind != sluice.ResultFailed || r.Line.Response != nil || r.Line.Error == nil || r.Line.Error.Code != "untranslatable_response" {
		t.Fatalf("untranslatable: %+v %+v", r, r.Line.Error)
	}

	r = sluice.Result{CustomID: "x", Kind: sluice.ResultRetryable, Line: sluice.OutputLine{CustomID: "x",
		Error: &sluice.LineError{Code: "batch_expired"}}}
	rt.TranslateResult(chat, &r)
	if r.Kind != sluice.ResultRetryable || r.Line.Error.Code != "batch_expired" {
		t.Fatalf("a line error was changed: %+v", r)
	}
}

// A model map on --provider local must keep its codec routed: Anthropic and
// Cloudflare lines are still written in their own family's format.
func TestPlanCodecModelMapKeepsLocalRouted(t *testing.T) {
	p := Presets["local"]
	c := p.PlanCodec(ChatOptions{ModelMap: map[string]string{"a": "b"}})
	r, ok := c.(sluice.RoutedCodec)
	if !ok {
		t.Fatalf("local's plan codec with a model map is %T, not a RoutedCodec", c)
	}
	for url, want := range map[string]sluice.Codec{
		"/v1/messages":                AnthropicCodec{},
		"/ai/run/@cf/meta/llama-3-8b": CloudflareCodec{},
		"/v1/chat/completions":        p.nativeCodec().(MixedCodec).OpenAI,
	} {
		got, _ := r.For(url)
		if string(got.Envelope().Header) != string(want.Envelope().Header) || string(got.Envelope().Footer) != string(want.Envelope().Footer) {
			t.Errorf("%s: envelope %q…%q, want %q…%q", url, got.Envelope().Header, got.Envelope().Footer, want.Envelope().Header, want.Envelope().Footer)
		}
	}
}
