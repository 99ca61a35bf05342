package translate

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestBedrockBodies: a chat body becomes, by the model id, Claude's
// InvokeModel body (the Anthropic translation without model, with
// anthropic_version bedrock-2023-05-31), Llama 3's prompt body, Nova's
// messages-v1 body, or a Converse request; what the text-only bodies
// cannot say is refused; and each answer reads back as a chat.completion.
func TestBedrockBodies(t *testing.T) {
	body := []byte(`{"model":"x","max_tokens":64,"temperature":0.2,"stop":["END"],"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi?"}]}`)
	for _, tc := range []struct {
		model string
		want  map[string]string // gjson path: raw value
	}{
		{"anthropic.claude-3-haiku-20240307-v1:0", map[string]string{"anthropic_version": `"bedrock-2023-05-31"`, "max_tokens": "64",
			"system": `"Be brief."`, "messages.0.role": `"user"`, "stop_sequences.0": `"END"`, "model": ""}},
		{"us.anthropic.claude-sonnet-4-5-20250929-v1:0", map[string]string{"anthropic_version": `"bedrock-2023-05-31"`, "model": ""}},
		{"amazon.nova-lite-v1:0", map[string]string{"schemaVersion": `"messages-v1"`, "system.0.text": `"Be brief."`,
			"messages.0.content.0.text": `"Hi?"`, "inferenceConfig.maxTokens": "64", "inferenceConfig.stopSequences.0": `"END"`}},
		{"mistral.mistral-large-2402-v1:0", map[string]string{"schemaVersion": "", "messages.0.role": `"user"`, "inferenceConfig.temperature": "0.2"}},
	} {
		out, err := Bedrock.Request(nil, body, tc.model, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.model, err)
		}
		for path, want := range tc.want {
			if got := gjson.GetBytes(out, path).Raw; got != want {
				t.Errorf("%s: %s = %s, want %s\n%s", tc.model, path, got, want, out)
			}
		}
	}
	llama := []byte(`{"model":"x","max_tokens":32,"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`)
	out, err := Bedrock.Request(nil, llama, "meta.llama3-8b-instruct-v1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if gjson.GetBytes(out, "prompt").String() != want || gjson.GetBytes(out, "max_gen_len").Int() != 32 {
		t.Errorf("llama body: %s", out)
	}
	tools := []byte(`{"model":"x","max_tokens":8,"messages":[{"role":"user","content":"U"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`)
	if _, err := Bedrock.Request(nil, tools, "amazon.nova-pro-v1:0", nil); err == nil || !strings.Contains(err.Error(), "tools") {
		t.Errorf("tools on Nova: %v, want refused", err)
	}
	if _, err := Bedrock.Request(nil, tools, "anthropic.claude-3-haiku-20240307-v1:0", nil); err != nil {
		t.Errorf("tools on Claude: %v", err)
	}
	for _, tc := range []struct{ model, answer, text, finish string }{
		{"anthropic.claude-3-haiku-20240307-v1:0", `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`, "hello", "stop"},
		{"meta.llama3-8b-instruct-v1:0", `{"generation":"hi there","prompt_token_count":5,"generation_token_count":2,"stop_reason":"length"}`, "hi there", "length"},
		{"amazon.nova-lite-v1:0", `{"output":{"message":{"role":"assistant","content":[{"text":"yo"}]}},"stopReason":"end_turn","usage":{"inputTokens":4,"outputTokens":1,"totalTokens":5}}`, "yo", "stop"},
	} {
		res, err := Bedrock.Result(nil, []byte(tc.answer), Meta{ID: "chatcmpl-x", Model: tc.model, Created: 1})
		if err != nil {
			t.Fatalf("%s: %v", tc.model, err)
		}
		r := gjson.ParseBytes(res)
		if r.Get("object").String() != "chat.completion" || r.Get("choices.0.message.content").String() != tc.text ||
			r.Get("choices.0.finish_reason").String() != tc.finish || r.Get("usage.prompt_tokens").Int() == 0 {
			t.Errorf("%s: %s", tc.model, res)
		}
	}
}
