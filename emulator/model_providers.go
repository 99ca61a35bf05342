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

// validateCloudflare checks one batch item against the model's input
// schema, without computing its answer.
func validateCloudflare(model string, item []byte) error {
	_, _, _, err := runCloudflareModel(model, item, 0)
	return err
}

func (s *Server) runCloudflare(model string, item []byte) ([]byte, int64, int64, error) {
	return runCloudflareModel(model, item, cfEmbedDim(model, s.opts.EmbeddingDim))
}

// runCloudflareModel executes one Workers AI input and returns the
// model-specific result object. dim is the size of embeddings; with dim 0
// the input is only checked (res is nil for embedding models).
func runCloudflareModel(model string, item []byte, dim int) (res []byte, in, out int64, err error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(item, &obj) != nil || obj == nil {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return nil, 0, 0, errors.New("Type mismatch of '/', expected an object")
	}
	switch cfKind(model) {
	case "m3":
		return runBgeM3(model, obj, dim)
	case "embed":
		return runBgeEmbed(model, obj, dim)
	case "translate":
		return runM2M100(obj)
	}
	return runCFLLM(obj)
}

// runBgeEmbed answers {text, pooling} with {shape, data}.
func runBgeEmbed(model string, obj map[string]json.RawMessage, dim int) ([]byte, int64, int64, error) {
	texts, err := cfTexts(obj["text"])
	if err == nil {
		err = cfPooling(obj["pooling"])
	}
	if err != nil {
		return nil, 0, 0, err
	}
	data, in := cfEmbedAll(model, texts, dim)
	if dim <= 0 {
		return nil, in, 0, nil
	}
	return mustJSON(map[string]any{"shape": []int{len(texts), dim}, "data": data}), in, 0, nil
}

// runBgeM3 answers bge-m3's three inputs: {query, contexts} one score per
// context, {contexts} the contexts' embeddings as "response", {text} as
// the other bge models do.
func runBgeM3(model string, obj map[string]json.RawMessage, dim int) ([]byte, int64, int64, error) {
	if _, ok := obj["contexts"]; !ok {
		return runBgeEmbed(model, obj, dim)
	}
	var ctxs []struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(obj["contexts"], &ctxs); err != nil || ctxs == nil {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return nil, 0, 0, errors.New("Type mismatch of '/contexts', expected an array of objects")
	}
	if err := cfTyped(obj, "truncate_inputs", "boolean"); err != nil {
		return nil, 0, 0, err
	}
	texts := make([]string, len(ctxs))
	for i, c := range ctxs {
		if c.Text != nil {
			texts[i] = *c.Text
		}
	}
	q, hasQuery := obj["query"]
	if !hasQuery {
		data, in := cfEmbedAll(model, texts, dim)
		if dim <= 0 {
			return nil, in, 0, nil
		}
		return mustJSON(map[string]any{"response": data, "shape": []int{len(texts), dim}}), in, 0, nil
	}
	var query string
	if json.Unmarshal(q, &query) != nil || string(q) == "null" {
		//lint:ignore ST1005 Cloudflare's own message, verbatim
		return nil, 0, 0, errors.New("Type mismatch of '/query', expected a string")
	}
	in := approxTokens(len(query))
	scores := make([]any, len(texts))
	for i, t := range texts {
		in += approxTokens(len(t))
		score := 0.3 + 0.6*unit(h64(0, "m3", query+"\x00"+t, 0))
		scores[i] = map[string]any{"id": i, "score": float64(int64(score*1e6)) / 1e6}
	}
	return mustJSON(map[string]any{"response": scores}), in, 0, nil
}

// cfEmbedAll embeds texts at dim (nothing with dim 0) and counts their
// tokens.
func cfEmbedAll(model string, texts []string, dim int) ([]any, int64) {
	var in int64
	data := make([]any, 0, len(texts))
	for _, t := range texts {
		in += approxTokens(len(t))
		if dim > 0 {
			data = append(data, embed(model, t, dim))
		}
	}
	return data, in
}

// runM2M100 answers {text, target_lang, source_lang} with translated_text.
func runM2M100(obj map[string]json.RawMessage) ([]byte, int64, int64, error) {
	var text, target string
	okText := json.Unmarshal(obj["text"], &text) == nil && len(obj["text"]) > 0 && string(obj["text"]) != "null"
	okTarget := json.Unmarshal(obj["target_lang"], &target) == nil && len(obj["target_lang"]) > 0 && string(obj["target_lang"]) != "null"
	if !okText || !okTarget {
		return nil, 0, 0, errors.New("required properties at '/' are 'text', 'target_lang'")
	}
	if err := cfTyped(obj, "source_lang", "string"); err != nil {
		return nil, 0, 0, err
	}
	t, _ := answer(text, 0)
	t = "[" + target + "] " + strings.TrimPrefix(t, "echo: ")
	return mustJSON(map[string]any{"translated_text": t}), approxTokens(len(text)), approxTokens(len(t)), nil
}

// runCFLLM answers a text generation input ({prompt} or {messages}) with
// {"response": …}.
func runCFLLM(obj map[string]json.RawMessage) ([]byte, int64, int64, error) {
	var maxTokens int64 = 256
	if raw, ok := obj["max_tokens"]; ok {
		if json.Unmarshal(raw, &maxTokens) != nil || string(raw) == "null" || maxTokens < 1 {
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, 0, 0, errors.New("Type mismatch of '/max_tokens', expected an integer >= 1")
		}
	}
	if err := checkCFLLMParams(obj); err != nil {
		return nil, 0, 0, err
	}
	var all, last string
	if raw, ok := obj["prompt"]; ok {
		var p string
		if json.Unmarshal(raw, &p) != nil || string(raw) == "null" {
			//lint:ignore ST1005 Cloudflare's own message, verbatim
			return nil, 0, 0, errors.New("Type mismatch of '/prompt', expected a string")
		}
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
