package emulator

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"
)

// The fake model is a pure function of the request body (and, for OpenAI
// objects that carry one, the `created` timestamp): the same input always
// gives the same output, whatever the seed. A chat answer is
// "echo: " + the first 40 characters of the last user message, reversed.
// Token counts are honest for that text: ceil(bytes/4) of the prompt text
// (every message's text, plus system/instructions) and of the answer.

type modelOut struct {
	status  int
	body    []byte
	in, out int64
}

func normEndpoint(ep string) string {
	if !strings.HasPrefix(ep, "/v1/") {
		return "/v1" + ep
	}
	return ep
}

// bodyID is a stable id suffix derived from a request body.
func bodyID(body []byte, n int) string { return hexID(0, "body", string(body), 0, n) }

// textOf extracts the text of a message content: a string, or the text of
// an array of parts ({"type":"text"|"input_text"|"output_text","text":…}).
func textOf(raw json.RawMessage) string {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var sb strings.Builder
		for i, p := range parts {
			if i > 0 && p.Text != "" {
				sb.WriteByte('\n')
			}
			sb.WriteString(p.Text)
		}
		return sb.String()
	}
	return ""
}

type message struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptOf returns every message's text joined and the last user message.
func promptOf(msgs []message, system string) (all, lastUser string) {
	var sb strings.Builder
	sb.WriteString(system)
	for _, m := range msgs {
		t := textOf(m.Content)
		if sb.Len() > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(t)
		if m.Role == "user" || m.Role == "" {
			lastUser = t
		}
	}
	return sb.String(), lastUser
}

// answer is the fake completion for a prompt, cut to maxTokens (0 = no
// limit); truncated reports the cut.
func answer(prompt string, maxTokens int64) (text string, truncated bool) {
	r := []rune(prompt)
	if len(r) > 40 {
		r = r[:40]
	}
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	text = "echo: " + string(r)
	if maxTokens > 0 && approxTokens(len(text)) > maxTokens {
		cut := int(maxTokens * 4)
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		return text[:cut], true
	}
	return text, false
}

// embed is a deterministic unit vector for (model, text).
func embed(model, text string, dim int) []float64 {
	v := make([]float64, dim)
	var norm float64
	for k := range v {
		v[k] = unit(h64(0, "emb", model+"\x00"+text, k))*2 - 1
		norm += v[k] * v[k]
	}
	norm = math.Sqrt(norm)
	for k := range v {
		v[k] = math.Round(v[k]/norm*1e6) / 1e6
	}
	return v
}

func badRequest(msg, param, code string) modelOut {
	return modelOut{status: 400, body: mustJSON(map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": nullable(param), "code": nullable(code)}})}
}

// runOpenAI executes one OpenAI endpoint call on the fake model.
func (s *Server) runOpenAI(endpoint string, body []byte, created int64) modelOut {
	if !json.Valid(body) || len(bytes.TrimSpace(body)) == 0 || bytes.TrimSpace(body)[0] != '{' {
		return badRequest("We could not parse the JSON body of your request.", "", "")
	}
	var common struct {
		Model string `json:"model"`
	}
	json.Unmarshal(body, &common)
	if common.Model == "" && endpoint != "/v1/moderations" {
		return badRequest("you must provide a model parameter", "model", "missing_required_parameter")
	}
	switch endpoint {
	case "/v1/chat/completions":
		return s.chat(body, common.Model, created)
	case "/v1/completions":
		return s.completion(body, common.Model, created)
	case "/v1/embeddings":
		return s.embeddings(body, common.Model)
	case "/v1/responses":
		return s.responses(body, common.Model, created)
	case "/v1/moderations":
		return s.moderations(body, common.Model)
	}
	return badRequest("The emulator does not implement "+endpoint+".", "", "unsupported_endpoint")
}

func (s *Server) chat(body []byte, model string, created int64) modelOut {
	var req struct {
		Messages            *[]message `json:"messages"`
		MaxTokens           int64      `json:"max_tokens"`
		MaxCompletionTokens int64      `json:"max_completion_tokens"`
		N                   int        `json:"n"`
		ResponseFormat      struct {
			Type string `json:"type"`
		} `json:"response_format"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return badRequest("Invalid request body: "+err.Error(), "", "invalid_value")
	}
	if req.Messages == nil {
		return badRequest("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
	}
	if len(*req.Messages) == 0 {
		return badRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
	}
	all, last := promptOf(*req.Messages, "")
	limit := req.MaxCompletionTokens
	if limit == 0 {
		limit = req.MaxTokens
	}
	text, cut := answer(last, limit)
	finish := "stop"
	if cut {
		finish = "length"
	}
	n := max(req.N, 1)
	msg := chatMessage{Role: "assistant", Content: &text, Annotations: []any{}}
	// A forced tool (tool_choice "required", or a named function) is
	// called with the answer as its arguments, as the model answers a
	// forced tool: content null, one tool call; finish_reason tool_calls
	// for "required", stop for a named function (as OpenAI reports it).
	// JSON mode (response_format json_object or json_schema) answers with
	// a JSON value as the content.
	var choice string
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch {
	case json.Unmarshal(req.ToolChoice, &choice) == nil && (choice == "required" || choice == "any") && len(req.Tools) > 0:
		msg.Content, msg.ToolCalls, finish = nil, toolCall(body, req.Tools[0].Function.Name, text), "tool_calls"
	case json.Unmarshal(req.ToolChoice, &named) == nil && named.Function.Name != "":
		msg.Content, msg.ToolCalls = nil, toolCall(body, named.Function.Name, text)
	case req.ResponseFormat.Type == "json_object" || req.ResponseFormat.Type == "json_schema":
		js := string(mustJSON(map[string]any{"echo": text}))
		msg.Content = &js
	}
	choices := make([]chatChoice, n)
	for i := range choices {
		choices[i] = chatChoice{Index: i, FinishReason: finish, Message: msg}
	}
	in, out := approxTokens(len(all)), approxTokens(len(text))*int64(n)
	return modelOut{200, mustJSON(chatCompletion{ID: "chatcmpl-" + bodyID(body, 12), Object: "chat.completion",
		Created: created, Model: model, Choices: choices, Usage: newUsage(in, out),
		ServiceTier: "default", SystemFingerprint: "fp_emulator"}), in, out}
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             usage        `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role        string  `json:"role"`
	Content     *string `json:"content"`
	Refusal     *string `json:"refusal"`
	ToolCalls   []any   `json:"tool_calls,omitempty"`
	Annotations []any   `json:"annotations"`
}

// toolCall is the one tool call of a forced tool: name called with
// {"echo": text}.
func toolCall(body []byte, name, text string) []any {
	return []any{map[string]any{"id": "call_" + bodyID(body, 24), "type": "function",
		"function": map[string]any{"name": name, "arguments": string(mustJSON(map[string]any{"echo": text}))}}}
}

type usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
		AudioTokens  int64 `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int64 `json:"reasoning_tokens"`
		AudioTokens              int64 `json:"audio_tokens"`
		AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

func newUsage(in, out int64) usage {
	return usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}
}

// stringsOf accepts a string or an array of strings; token arrays are
// rendered as their JSON text.
func stringsOf(raw json.RawMessage) ([]string, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, true
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		return many, true
	}
	var toks []json.RawMessage
	if json.Unmarshal(raw, &toks) == nil && len(toks) > 0 {
		if toks[0][0] == '[' {
			out := make([]string, len(toks))
			for i, t := range toks {
				out[i] = string(t)
			}
			return out, true
		}
		return []string{string(raw)}, true
	}
	return nil, false
}

func (s *Server) completion(body []byte, model string, created int64) modelOut {
	var req struct {
		Prompt    json.RawMessage `json:"prompt"`
		MaxTokens int64           `json:"max_tokens"`
	}
	json.Unmarshal(body, &req)
	prompts, ok := stringsOf(req.Prompt)
	if len(req.Prompt) == 0 || !ok || len(prompts) == 0 {
		return badRequest("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter")
	}
	limit := req.MaxTokens
	if limit == 0 {
		limit = 16 // the API's default
	}
	var in, out int64
	choices := make([]any, len(prompts))
	for i, p := range prompts {
		text, cut := answer(p, limit)
		finish := "stop"
		if cut {
			finish = "length"
		}
		in += approxTokens(len(p))
		out += approxTokens(len(text))
		choices[i] = map[string]any{"index": i, "text": text, "logprobs": nil, "finish_reason": finish}
	}
	return modelOut{200, mustJSON(map[string]any{"id": "cmpl-" + bodyID(body, 12), "object": "text_completion",
		"created": created, "model": model, "choices": choices, "usage": newUsage(in, out),
		"system_fingerprint": "fp_emulator"}), in, out}
}

func (s *Server) embeddings(body []byte, model string) modelOut {
	var req struct {
		Input          json.RawMessage `json:"input"`
		Dimensions     int             `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	json.Unmarshal(body, &req)
	inputs, ok := stringsOf(req.Input)
	if len(req.Input) == 0 {
		return badRequest("Missing required parameter: 'input'.", "input", "missing_required_parameter")
	}
	if !ok || len(inputs) == 0 {
		return badRequest("'$.input' is invalid. Please check the API reference.", "input", "invalid_value")
	}
	dim := s.opts.EmbeddingDim
	if req.Dimensions > 0 {
		dim = req.Dimensions
	}
	var in int64
	data := make([]any, len(inputs))
	for i, t := range inputs {
		if t == "" {
			return badRequest("'$.input' is invalid. Please check the API reference.", "input", "invalid_value")
		}
		in += approxTokens(len(t))
		var vec any = embed(model, t, dim)
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*dim)
			for k, f := range vec.([]float64) {
				binary.LittleEndian.PutUint32(buf[4*k:], math.Float32bits(float32(f)))
			}
			vec = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": vec}
	}
	return modelOut{200, mustJSON(map[string]any{"object": "list", "data": data, "model": model,
		"usage": map[string]any{"prompt_tokens": in, "total_tokens": in}}), in, 0}
}

func (s *Server) responses(body []byte, model string, created int64) modelOut {
	var req struct {
		Input           json.RawMessage   `json:"input"`
		Instructions    *string           `json:"instructions"`
		MaxOutputTokens int64             `json:"max_output_tokens"`
		Metadata        map[string]string `json:"metadata"`
		Temperature     *float64          `json:"temperature"`
		TopP            *float64          `json:"top_p"`
	}
	json.Unmarshal(body, &req)
	if len(req.Input) == 0 {
		return badRequest("Missing required parameter: 'input'.", "input", "missing_required_parameter")
	}
	var msgs []message
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		msgs = []message{{Role: "user", Content: mustJSON(one)}}
	} else if json.Unmarshal(req.Input, &msgs) != nil {
		return badRequest("Invalid 'input'.", "input", "invalid_value")
	}
	system := ""
	if req.Instructions != nil {
		system = *req.Instructions
	}
	all, last := promptOf(msgs, system)
	text, cut := answer(last, req.MaxOutputTokens)
	status, incomplete := "completed", any(nil)
	if cut {
		status, incomplete = "incomplete", map[string]any{"reason": "max_output_tokens"}
	}
	in, out := approxTokens(len(all)), approxTokens(len(text))
	temp, topP := 1.0, 1.0
	if req.Temperature != nil {
		temp = *req.Temperature
	}
	if req.TopP != nil {
		topP = *req.TopP
	}
	md := map[string]string{}
	for k, v := range req.Metadata {
		md[k] = v
	}
	id := bodyID(body, 24)
	return modelOut{200, mustJSON(map[string]any{
		"id": "resp_" + id, "object": "response", "created_at": created, "status": status,
		"error": nil, "incomplete_details": incomplete, "instructions": req.Instructions,
		"max_output_tokens": nullableInt(req.MaxOutputTokens), "model": model,
		"output": []any{map[string]any{"type": "message", "id": "msg_" + id, "status": "completed",
			"role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": text,
				"annotations": []any{}, "logprobs": []any{}}}}},
		"parallel_tool_calls": true, "previous_response_id": nil, "reasoning": map[string]any{"effort": nil, "summary": nil},
		"store": true, "temperature": temp, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice": "auto", "tools": []any{}, "top_p": topP, "truncation": "disabled",
		"usage": map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + out},
		"metadata": md}), in, out}
}

func nullableInt(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

var moderationCategories = []string{"harassment", "harassment/threatening", "hate", "hate/threatening",
	"illicit", "illicit/violent", "self-harm", "self-harm/instructions", "self-harm/intent", "sexual",
	"sexual/minors", "violence", "violence/graphic"}

func (s *Server) moderations(body []byte, model string) modelOut {
	var req struct {
		Input json.RawMessage `json:"input"`
	}
	json.Unmarshal(body, &req)
	inputs, ok := stringsOf(req.Input)
	if !ok || len(inputs) == 0 {
		return badRequest("Missing required parameter: 'input'.", "input", "missing_required_parameter")
	}
	if model == "" {
		model = "omni-moderation-latest"
	}
	results := make([]any, len(inputs))
	var in int64
	for i, t := range inputs {
		in += approxTokens(len(t))
		cats, scores := map[string]any{}, map[string]any{}
		for k, c := range moderationCategories {
			cats[c] = false
			scores[c] = math.Round(unit(h64(0, "mod", t, k))*1e-3*1e6) / 1e6
		}
		results[i] = map[string]any{"flagged": false, "categories": cats, "category_scores": scores,
			"category_applied_input_types": map[string]any{}}
	}
	return modelOut{200, mustJSON(map[string]any{"id": "modr-" + bodyID(body, 12), "model": model,
		"results": results}), in, 0}
}

// oaiSync serves a model endpoint directly (not in a batch).
func (s *Server) oaiSync(endpoint string) http.HandlerFunc {
	return s.syncOpenAIShape(famOpenAI, endpoint)
}

// syncOpenAIShape answers a direct call of an OpenAI-shaped synchronous
// endpoint for family (OpenAI, Mistral, Together): the same model as the
// family's batches, counted by countSync under the job its batches count
// under (syncJobKey).
func (s *Server) syncOpenAIShape(family, endpoint string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readLimited(r, 32<<20)
		if err != nil {
			oaiError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", err.Error(), "", "")
			return
		}
		if !s.syncAdmit(w, family) {
			return
		}
		m := s.runOpenAI(endpoint, body, s.now().Unix())
		s.countSync(family, syncJobKey(family, r.Header.Get(HeaderSyncJob)), r, m.status)
		if s.syncWait(r) != nil {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(m.status)
		w.Write(m.body)
	}
}

func readLimited(r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("request body too large or unreadable after %d bytes: %v", n, err)
	}
	return buf.Bytes(), nil
}
