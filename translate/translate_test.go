package translate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func req(extra string) []byte {
	b := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":10`
	if extra != "" {
		b += "," + extra
	}
	return []byte(b + "}")
}

// TestRejections: every parameter a target cannot honour is an *Error
// naming it, never silently dropped.
func TestRejections(t *testing.T) {
	cases := []struct {
		target, body, param string
	}{
		{"anthropic", `"logit_bias":{"1":5}`, "logit_bias"},
		{"anthropic", `"presence_penalty":0.1`, "presence_penalty"},
		{"anthropic", `"frequency_penalty":-0.5`, "frequency_penalty"},
		{"anthropic", `"logprobs":true`, "logprobs"},
		{"anthropic", `"top_logprobs":3`, "top_logprobs"},
		{"anthropic", `"n":3`, "n"},
		{"anthropic", `"temperature":1.5`, "temperature"},
		{"anthropic", `"reasoning_effort":"high"`, "reasoning_effort"},
		{"anthropic", `"stream":true`, "stream"},
		{"anthropic", `"verbosity":"low"`, "verbosity"},
		{"anthropic", `"audio":{"voice":"alloy","format":"mp3"}`, "audio"},
		{"anthropic", `"modalities":["text","audio"]`, "modalities"},
		{"anthropic", `"web_search_options":{}`, "web_search_options"},
		{"anthropic", `"functions":[{"name":"f"}]`, "functions"},
		{"anthropic", `"response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"f"}}]`, "response_format"},
		{"anthropic", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array"}}}`, "response_format.json_schema.schema"},
		{"anthropic", `"tools":[{"type":"custom","custom":{"name":"f"}}]`, "tools[0].type"},
		{"anthropic", `"tools":[{"type":"function","function":{"name":"sluice_response_format"}}]`, "tools[0].function.name"},
		{"anthropic", `"tool_choice":"required"`, "tool_choice"},
		{"anthropic", `"some_vendor_knob":1`, "some_vendor_knob"},
		{"anthropic", `"max_completion_tokens":20`, "max_completion_tokens"},
		{"cloudflare", `"stop":"x"`, "stop"},
		{"cloudflare", `"logit_bias":{"1":5}`, "logit_bias"},
		{"cloudflare", `"n":2`, "n"},
		{"cloudflare", `"logprobs":true`, "logprobs"},
		{"gemini", `"stop":["1","2","3","4","5","6"]`, "stop"},
		{"gemini", `"logit_bias":{"1":5}`, "logit_bias"},
		{"gemini", `"reasoning_effort":"low"`, "reasoning_effort"},
		{"mistral", `"logit_bias":{"1":5}`, "logit_bias"},
		{"mistral", `"logprobs":true`, "logprobs"},
		{"mistral", `"reasoning_effort":"low"`, "reasoning_effort"},
		{"together", `"logprobs":true`, "logprobs"},
		{"together", `"stream":true`, "stream"},
	}
	for _, c := range cases {
		t.Run(c.target+"/"+c.param, func(t *testing.T) {
			_, err := Lookup(c.target).Request(nil, req(c.body), "m", nil)
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("want a *translate.Error, got %v", err)
			}
			if te.Param != c.param {
				t.Fatalf("error names %q (%v), want %q", te.Param, err, c.param)
			}
			if !strings.HasPrefix(err.Error(), "body."+c.param+": ") {
				t.Fatalf("error text %q does not start with body.%s", err, c.param)
			}
		})
	}
}

// TestMessageRejections: message shapes a target cannot express.
func TestMessageRejections(t *testing.T) {
	cases := []struct{ target, body, param string }{
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"system","content":"late"}]}`, "messages[1].role"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","name":"ann","content":"a"}]}`, "messages[0].name"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/tiff;base64,AAAA"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "messages[0].content[0]"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"function","name":"f","content":"x"}]}`, "messages[0].role"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"not json"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id"},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[]}`, "messages"},
		{"gemini", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"tool","tool_call_id":"nope","content":"x"}]}`, "messages[1].tool_call_id"},
		{"cloudflare", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"mistral", `{"model":"m","messages":[{"role":"user","name":"ann","content":"a"}]}`, "messages[0].name"},
	}
	for _, c := range cases {
		t.Run(c.target+"/"+c.param, func(t *testing.T) {
			_, err := Lookup(c.target).Request(nil, []byte(c.body), "m", nil)
			var te *Error
			if !errors.As(err, &te) || te.Param != c.param {
				t.Fatalf("want an error naming %q, got %v", c.param, err)
			}
		})
	}
}

// TestWarnings: what is left out with a warning, and that a rejected
// request tells no warnings.
func TestWarnings(t *testing.T) {
	body := req(`"store":true,"metadata":{"a":"b"},"service_tier":"flex","seed":3,"prompt_cache_key":"k"`)
	var got []string
	out, err := Anthropic.Request(nil, body, "claude-x", func(w Warning) { got = append(got, w.Param) })
	if err != nil {
		t.Fatal(err)
	}
	want := "store,metadata,service_tier,prompt_cache_key,seed"
	if strings.Join(got, ",") != want {
		t.Fatalf("warnings %v, want %s", got, want)
	}
	for _, k := range []string{"store", "metadata", "service_tier", "seed", "prompt_cache_key"} {
		if gjson.GetBytes(out, k).Exists() {
			t.Errorf("%s was sent: %s", k, out)
		}
	}
	got = nil
	if _, err := Anthropic.Request(nil, req(`"store":true,"n":2`), "m", func(w Warning) { got = append(got, w.Param) }); err == nil {
		t.Fatal("n=2 translated")
	}
	if len(got) != 0 {
		t.Fatalf("a rejected request told warnings %v", got)
	}
	// store:false and stream:false are OpenAI's defaults: nothing to say.
	got = nil
	if _, err := Anthropic.Request(nil, req(`"store":false,"stream":false,"modalities":["text"]`), "m", func(w Warning) { got = append(got, w.Param) }); err != nil || len(got) != 0 {
		t.Fatalf("defaults: err %v, warnings %v", err, got)
	}
}

// TestFieldMapping checks the mappings one field at a time, for each
// target, on one request that uses them all.
func TestFieldMapping(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[
		{"role":"system","content":"sys \"one\""},
		{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/AAAA"}}]},
		{"role":"assistant","content":"calling","tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":[1,2]}"}}]},
		{"role":"tool","tool_call_id":"call_a","content":"done"}],
		"max_completion_tokens":77,"temperature":0.5,"top_p":0.8,"stop":["STOP"],
		"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"array"}}}}}],
		"tool_choice":{"type":"function","function":{"name":"f"}}}`)
	check := func(t *testing.T, out []byte, want map[string]string) {
		t.Helper()
		for path, v := range want {
			if got := gjson.GetBytes(out, path).Raw; got != v {
				t.Errorf("%s = %s, want %s\n%s", path, got, v, out)
			}
		}
	}
	t.Run("anthropic", func(t *testing.T) {
		out, err := Anthropic.Request(nil, body, "claude-haiku-4-5", nil)
		if err != nil {
			t.Fatal(err)
		}
		check(t, out, map[string]string{
			"model": `"claude-haiku-4-5"`, "max_tokens": "77", "system": `"sys \"one\""`,
			"temperature": "0.5", "top_p": "0.8", "stop_sequences": `["STOP"]`,
			"messages.#": "3", "messages.0.role": `"user"`,
			"messages.0.content.1.source": `{"type":"base64","media_type":"image/jpeg","data":"/9j/AAAA"}`,
			"messages.1.role":             `"assistant"`, "messages.1.content.0.text": `"calling"`,
			"messages.1.content.1": `{"type":"tool_use","id":"call_a","name":"f","input":{"x":[1,2]}}`,
			"messages.2.role":      `"user"`, "messages.2.content.0": `{"type":"tool_result","tool_use_id":"call_a","content":"done"}`,
			"tools.0.input_schema.type": `"object"`, "tools.0.description": `"d"`,
			"tool_choice": `{"type":"tool","name":"f"}`,
		})
	})
	t.Run("gemini", func(t *testing.T) {
		out, err := Gemini.Request(nil, body, "gemini-2.5-flash", nil)
		if err != nil {
			t.Fatal(err)
		}
		check(t, out, map[string]string{
			"model": "", "systemInstruction.parts.0.text": `"sys \"one\""`,
			"contents.0.parts.1.inlineData": `{"mimeType":"image/jpeg","data":"/9j/AAAA"}`,
			"contents.1.role":               `"model"`, "contents.1.parts.1.functionCall": `{"name":"f","args":{"x":[1,2]}}`,
			"contents.2.parts.0.functionResponse": `{"name":"f","response":{"content":"done"}}`,
			"generationConfig.maxOutputTokens":    "77", "generationConfig.temperature": "0.5",
			"generationConfig.topP": "0.8", "generationConfig.stopSequences": `["STOP"]`,
			"toolConfig.functionCallingConfig": `{"mode":"ANY","allowedFunctionNames":["f"]}`,
		})
	})
	t.Run("mistral", func(t *testing.T) {
		out, err := Mistral.Request(nil, body, "mistral-small-latest", nil)
		if err != nil {
			t.Fatal(err)
		}
		id := mistralToolID("call_a")
		check(t, out, map[string]string{
			"model": `"mistral-small-latest"`, "max_tokens": "77", "max_completion_tokens": "",
			"messages.2.tool_calls.0.id": `"` + id + `"`, "messages.3.tool_call_id": `"` + id + `"`,
			"tool_choice": `{"type":"function","function":{"name":"f"}}`,
		})
		if len(id) != 9 {
			t.Fatalf("mistral tool id %q", id)
		}
	})
	t.Run("cloudflare", func(t *testing.T) {
		b := []byte(strings.Replace(strings.Replace(string(body), `"stop":["STOP"],`, "", 1),
			`"tool_choice":{"type":"function","function":{"name":"f"}}`, `"tool_choice":"auto"`, 1))
		out, err := Cloudflare.Request(nil, b, "@cf/meta/llama-4-scout-17b-16e-instruct", nil)
		if err != nil {
			t.Fatal(err)
		}
		check(t, out, map[string]string{
			"model": "", "max_tokens": "77", "messages.0.role": `"system"`,
			"messages.1.content.1":  `{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/AAAA"}}`,
			"messages.3":            `{"role":"tool","content":"done","tool_call_id":"call_a"}`,
			"tools.0.function.name": `"f"`,
		})
	})
}

// TestResultKeepsUnicodeAndEscapes: text with quotes, newlines and
// non-ASCII survives the round trip exactly.
func TestResultKeepsUnicodeAndEscapes(t *testing.T) {
	text := "line one\n\"quoted\" — ünïcode ✓ \u2028 tab\t"
	msg, _ := json.Marshal(map[string]any{"id": "msg_1", "type": "message", "model": "c", "stop_reason": "end_turn",
		"content": []any{map[string]any{"type": "text", "text": text}}, "usage": map[string]any{"input_tokens": 1, "output_tokens": 2}})
	out, err := Anthropic.Result(nil, msg, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(out, "choices.0.message.content").String(); got != text {
		t.Fatalf("content %q, want %q", got, text)
	}
	if err := validCompletion(out); err != nil {
		t.Fatal(err)
	}
}

// TestResultRejectsWrongShapes: an answer that is not the target's
// response shape is an error, not an empty chat.completion.
func TestResultRejectsWrongShapes(t *testing.T) {
	for _, c := range []struct{ target, body string }{
		{"anthropic", `{"type":"error","error":{"type":"x","message":"y"}}`},
		{"anthropic", `[]`},
		{"anthropic", `{"content":"text"}`},
		{"cloudflare", `{"result":{}}`},
		{"gemini", `{"foo":1}`},
		{"mistral", `{"choices":[]}`},
		{"together", `{"choices":[{"message":"x"}]}`},
		{"mistral", `not json`},
	} {
		if out, err := Lookup(c.target).Result(nil, []byte(c.body), Meta{ID: "x"}); err == nil {
			t.Errorf("%s %s: translated to %s", c.target, c.body, out)
		}
	}
}

// TestDefaultMaxTokens: the default fills only bodies that set no limit.
func TestDefaultMaxTokens(t *testing.T) {
	none := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if _, err := Anthropic.Translate(nil, none, Options{Model: "c"}); err == nil {
		t.Fatal("anthropic took a body without max_tokens")
	}
	out, err := Anthropic.Translate(nil, none, Options{Model: "c", DefaultMaxTokens: 300})
	if err != nil || gjson.GetBytes(out, "max_tokens").Raw != "300" {
		t.Fatalf("%s %v", out, err)
	}
	out, err = Gemini.Translate(nil, req(""), Options{Model: "g", DefaultMaxTokens: 300})
	if err != nil || gjson.GetBytes(out, "generationConfig.maxOutputTokens").Raw != "10" {
		t.Fatalf("the default replaced the body's own limit: %s %v", out, err)
	}
}
