package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// runAnthropic executes Messages params. On success body is a Message; on
// a 400 body is the inner error object {"type":…,"message":…}.
func (s *Server) runAnthropic(params []byte, tier string) modelOut {
	bad := func(msg string) modelOut {
		return modelOut{status: 400, body: mustJSON(map[string]any{"type": "invalid_request_error", "message": msg})}
	}
	var p struct {
		Model     string          `json:"model"`
		MaxTokens *int64          `json:"max_tokens"`
		Messages  *[]message      `json:"messages"`
		System    json.RawMessage `json:"system"`
		Tools     []struct {
			Name string `json:"name"`
		} `json:"tools"`
		ToolChoice struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tool_choice"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return bad("invalid request body: " + err.Error())
	}
	if msg := checkAnthropicParams(p.Model, p.MaxTokens, p.Messages != nil); msg != "" {
		return bad(msg)
	}
	if len(*p.Messages) == 0 {
		return bad("messages: at least one message is required")
	}
	for i, m := range *p.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return bad(fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
		}
	}
	all, last := promptOf(*p.Messages, textOf(p.System))
	text, cut := answer(last, *p.MaxTokens)
	stop := "end_turn"
	if cut {
		stop = "max_tokens"
	}
	in, out := approxTokens(len(all)), approxTokens(len(text))
	content := []any{map[string]any{"type": "text", "text": text}}
	// A forced tool (tool_choice "tool", or "any" with tools) is called,
	// with the answer as its input, as Claude answers a forced tool: one
	// tool_use block and stop_reason tool_use.
	tool := p.ToolChoice.Name
	if p.ToolChoice.Type == "any" && len(p.Tools) > 0 {
		tool = p.Tools[0].Name
	}
	if (p.ToolChoice.Type == "tool" || p.ToolChoice.Type == "any") && tool != "" {
		content = []any{map[string]any{"type": "tool_use", "id": "toolu_01" + b58ID(0, "toolu", string(params), 0, 22),
			"name": tool, "input": map[string]any{"echo": text}}}
		stop = "tool_use"
	}
	return modelOut{200, mustJSON(map[string]any{
		"id": "msg_01" + b58ID(0, "msg", string(params), 0, 22), "type": "message", "role": "assistant",
		"model": p.Model, "content": content,
		"stop_reason": stop, "stop_sequence": nil, "container": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": out,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": tier}}), in, out}
}

// checkAnthropicParams is the create-time check of a batch item's params.
func checkAnthropicParams(model string, maxTokens *int64, hasMessages bool) string {
	switch {
	case model == "":
		return "model: Field required"
	case maxTokens == nil:
		return "max_tokens: Field required"
	case *maxTokens < 1:
		return "max_tokens: Input should be greater than or equal to 1"
	case !hasMessages:
		return "messages: Field required"
	}
	return ""
}

// cfKind classifies a Workers AI model by name.
func cfKind(model string) string {
	switch {
	case strings.Contains(model, "bge-m3"):
		return "m3"
	case strings.Contains(model, "bge") || strings.Contains(model, "embed"):
		return "embed"
	case strings.Contains(model, "m2m100"):
		return "translate"
	}
	return "llm"
}

// validateCloudflare checks one batch item against the model's input schema.
func validateCloudflare(model string, item []byte) error {
	_, _, _, err := runCloudflareModel(model, item, 8)
	return err
}

func (s *Server) runCloudflare(model string, item []byte) ([]byte, int64, int64, error) {
	return runCloudflareModel(model, item, s.opts.EmbeddingDim)
}

// runCloudflareModel executes one Workers AI input and returns the
// model-specific result object.
func runCloudflareModel(model string, item []byte, dim int) (res []byte, in, out int64, err error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(item, &obj) != nil || obj == nil {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return nil, 0, 0, errors.New("Type mismatch of '/', expected an object")
	}
	str := func(k string) (string, bool) {
		var v string
		ok := json.Unmarshal(obj[k], &v) == nil && len(obj[k]) > 0
		return v, ok
	}
	switch cfKind(model) {
	case "m3":
		if q, ok := str("query"); ok {
			var ctxs []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(obj["contexts"], &ctxs) != nil || len(ctxs) == 0 {
				return nil, 0, 0, errors.New("required properties at '/' are 'contexts'")
			}
			in = approxTokens(len(q))
			scores := make([]any, len(ctxs))
			for i, c := range ctxs {
				in += approxTokens(len(c.Text))
				score := 0.3 + 0.6*unit(h64(0, "m3", q+"\x00"+c.Text, 0))
				scores[i] = map[string]any{"id": i, "score": float64(int64(score*1e6)) / 1e6}
			}
			return mustJSON(map[string]any{"response": scores}), in, 0, nil
		}
		fallthrough
	case "embed":
		texts, ok := stringsOf(obj["text"])
		if len(obj["text"]) == 0 || !ok || len(texts) == 0 {
			return nil, 0, 0, errors.New("required properties at '/' are 'text'")
		}
		data := make([]any, len(texts))
		for i, t := range texts {
			in += approxTokens(len(t))
			data[i] = embed(model, t, dim)
		}
		return mustJSON(map[string]any{"shape": []int{len(texts), dim}, "data": data}), in, 0, nil
	case "translate":
		text, ok := str("text")
		target, ok2 := str("target_lang")
		if !ok || !ok2 {
			return nil, 0, 0, errors.New("required properties at '/' are 'text', 'target_lang'")
		}
		t, _ := answer(text, 0)
		t = "[" + target + "] " + strings.TrimPrefix(t, "echo: ")
		return mustJSON(map[string]any{"translated_text": t}), approxTokens(len(text)), approxTokens(len(t)), nil
	}
	var maxTokens int64 = 256
	if len(obj["max_tokens"]) > 0 {
		if json.Unmarshal(obj["max_tokens"], &maxTokens) != nil || maxTokens < 1 {
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, 0, 0, errors.New("Type mismatch of '/max_tokens', expected an integer >= 1")
		}
	}
	var all, last string
	if p, ok := str("prompt"); ok {
		if p == "" {
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, 0, 0, errors.New("String length of '/prompt' is less than 1")
		}
		all, last = p, p
	} else {
		var msgs []message
		if json.Unmarshal(obj["messages"], &msgs) != nil || len(msgs) == 0 {
			return nil, 0, 0, errors.New("required properties at '/' are 'prompt'")
		}
		all, last = promptOf(msgs, "")
	}
	text, _ := answer(last, maxTokens)
	var rf struct {
		Type string `json:"type"`
	}
	json.Unmarshal(obj["response_format"], &rf)
	if rf.Type == "json_object" || rf.Type == "json_schema" {
		// JSON mode answers with the JSON value itself, not a string.
		return mustJSON(map[string]any{"response": map[string]any{"echo": text}}), approxTokens(len(all)), approxTokens(len(text)), nil
	}
	return mustJSON(map[string]any{"response": text}), approxTokens(len(all)), approxTokens(len(text)), nil
}
