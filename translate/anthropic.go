package translate

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"
)

// Anthropic translates to and from the Messages API (the params of a
// Message Batches request).
var Anthropic = register(&Target{Name: "anthropic", request: anthropicRequest, result: anthropicResult, errBody: anthropicError})

var anthropicImageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

func anthropicRequest(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error) {
	const target = "anthropic"
	if _, err := others(c, target, warn, nil); err != nil {
		return dst, err
	}
	imageDetail(c, target, warn)
	if err := noPenalties(c, target); err != nil {
		return dst, err
	}
	if err := noLogprobs(c, target); err != nil {
		return dst, err
	}
	if err := oneChoice(c, target); err != nil {
		return dst, err
	}
	if !present(c.maxTokens) {
		return dst, errf("max_tokens", "anthropic requires max_tokens (or max_completion_tokens) on every request")
	}
	if present(c.temperature) && (c.temperature.Float() < 0 || c.temperature.Float() > 1) {
		return dst, errf("temperature", "anthropic takes 0 to 1, got %s", c.temperature.Raw)
	}
	if present(c.topP) && (c.topP.Float() < 0 || c.topP.Float() > 1) {
		return dst, errf("top_p", "must be between 0 and 1, got %s", c.topP.Raw)
	}
	if present(c.reasoning) {
		return dst, errf("reasoning_effort", "anthropic's extended thinking takes a token budget, not an effort; no faithful mapping")
	}
	if present(c.seed) {
		warn(Warning{Param: "seed", Reason: "anthropic has no seed; the answer is sampled the same way without it"})
	}
	jsonMode := present(c.format) && c.format.Get("type").Str != "text"
	if jsonMode && len(c.tools) > 0 {
		return dst, errf("response_format", "anthropic answers in JSON through a forced tool call, which cannot be combined with tools")
	}

	first := true
	dst = append(dst, '{')
	dst = appendKey(dst, &first, "model")
	dst = appendString(dst, model)
	dst = appendKey(dst, &first, "max_tokens")
	dst = append(dst, c.maxTokens.Raw...)

	// System and developer messages go to "system"; they must come first.
	i := 0
	for ; i < len(c.messages) && (c.messages[i].role == "system" || c.messages[i].role == "developer"); i++ {
	}
	if i > 0 {
		dst = appendKey(dst, &first, "system")
		if t, ok := singleText(c.messages[0].parts); i == 1 && ok {
			dst = appendStr(dst, t)
		} else {
			dst = append(dst, '[')
			n := 0
			for _, m := range c.messages[:i] {
				for _, p := range m.parts {
					if p.kind == "image" {
						return dst, errf(p.path(), "anthropic takes no images in the system prompt")
					}
					if n > 0 {
						dst = append(dst, ',')
					}
					n++
					dst = append(dst, `{"type":"text","text":`...)
					dst = appendStr(dst, p.text)
					dst = append(dst, '}')
				}
			}
			dst = append(dst, ']')
		}
	}
	for _, m := range c.messages {
		if present(m.name) {
			return dst, errf(m.path()+".name", "anthropic has no participant names, and the name can change the answer")
		}
	}
	dst = appendKey(dst, &first, "messages")
	dst = append(dst, '[')
	n := 0
	for j := i; j < len(c.messages); j++ {
		m := &c.messages[j]
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		var err error
		switch m.role {
		case "system", "developer":
			return dst, errf(m.path()+".role", "anthropic takes system instructions only before the conversation, not after its first turn")
		case "user":
			dst = append(dst, `{"role":"user","content":`...)
			dst, err = anthropicContent(dst, m.parts)
			dst = append(dst, '}')
		case "assistant":
			dst = append(dst, `{"role":"assistant","content":`...)
			dst, err = anthropicAssistant(dst, m)
			dst = append(dst, '}')
		case "tool":
			// Consecutive tool results form one user turn, as Anthropic
			// wants the results of parallel calls together.
			dst = append(dst, `{"role":"user","content":[`...)
			for k := j; k < len(c.messages) && c.messages[k].role == "tool"; k++ {
				if k > j {
					dst = append(dst, ',')
				}
				t := &c.messages[k]
				dst = append(dst, `{"type":"tool_result","tool_use_id":`...)
				dst = appendStr(dst, t.toolCallID)
				dst = append(dst, `,"content":`...)
				dst, err = anthropicContent(dst, t.parts)
				if err != nil {
					return dst, err
				}
				dst = append(dst, '}')
				j = k
			}
			dst = append(dst, "]}"...)
		}
		if err != nil {
			return dst, err
		}
	}
	dst = append(dst, ']')

	if len(c.stop) > 0 {
		dst = appendKey(dst, &first, "stop_sequences")
		dst = append(dst, '[')
		for k, s := range c.stop {
			if strings.TrimSpace(s.String()) == "" {
				return dst, errf("stop", "anthropic rejects stop sequences that are empty or only whitespace")
			}
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendStr(dst, s)
		}
		dst = append(dst, ']')
	}
	if present(c.temperature) {
		dst = appendKey(dst, &first, "temperature")
		dst = append(dst, c.temperature.Raw...)
	}
	if present(c.topP) {
		dst = appendKey(dst, &first, "top_p")
		dst = append(dst, c.topP.Raw...)
	}
	if present(c.user) {
		dst = appendKey(dst, &first, "metadata")
		dst = append(dst, `{"user_id":`...)
		dst = appendStr(dst, c.user)
		dst = append(dst, '}')
	}
	if len(c.tools) > 0 {
		dst = appendKey(dst, &first, "tools")
		dst = append(dst, '[')
		for k, t := range c.tools {
			if k > 0 {
				dst = append(dst, ',')
			}
			if t.strict.Type == gjson.True {
				warn(Warning{Param: "tools.function.strict", Reason: "anthropic has no strict mode; the tool's schema is still sent and followed"})
			}
			dst = append(dst, `{"name":`...)
			dst = appendStr(dst, t.name)
			if present(t.description) {
				dst = append(dst, `,"description":`...)
				dst = appendStr(dst, t.description)
			}
			dst = append(dst, `,"input_schema":`...)
			if present(t.parameters) {
				dst = append(dst, t.parameters.Raw...)
			} else {
				dst = append(dst, `{"type":"object","properties":{}}`...)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
		var err error
		if dst, err = anthropicToolChoice(dst, &first, c); err != nil {
			return dst, err
		}
	}
	if jsonMode {
		// JSON mode: a tool whose input schema is the wanted answer, and a
		// tool_choice that forces it; Result turns its input back into
		// the message content.
		schema := `{"type":"object"}`
		desc := "Give the answer as this tool's input."
		if c.format.Get("type").Str == "json_schema" {
			js := c.format.Get("json_schema")
			if s := js.Get("schema"); present(s) {
				if t := s.Get("type"); t.Exists() && t.String() != "object" {
					return dst, errf("response_format.json_schema.schema", "anthropic needs a schema whose root is an object")
				}
				schema = s.Raw
			}
			if d := js.Get("description"); d.Type == gjson.String && d.Str != "" {
				desc = d.String()
			}
		}
		dst = appendKey(dst, &first, "tools")
		dst = append(dst, `[{"name":"`+formatTool+`","description":`...)
		dst = appendString(dst, desc)
		dst = append(dst, `,"input_schema":`...)
		dst = append(dst, schema...)
		dst = append(dst, `}]`...)
		dst = appendKey(dst, &first, "tool_choice")
		dst = append(dst, `{"type":"tool","name":"`+formatTool+`"}`...)
	}
	return append(dst, '}'), nil
}

func anthropicToolChoice(dst []byte, first *bool, c *chat) ([]byte, error) {
	noParallel := c.parallel.Type == gjson.False
	tc := c.toolChoice
	typ, name := "auto", ""
	switch {
	case !present(tc):
	case tc.Type == gjson.String:
		switch tc.Str {
		case "none":
			typ = "none"
		case "auto":
		case "required":
			typ = "any"
		default:
			return dst, errf("tool_choice", "unknown value %q", tc.Str)
		}
	case tc.IsObject() && tc.Get("type").Str == "function":
		typ, name = "tool", tc.Get("function.name").String()
		if name == "" {
			return dst, errf("tool_choice.function.name", "is required")
		}
	default:
		return dst, errf("tool_choice", "only none, auto, required or a named function can be translated")
	}
	if !present(tc) && !noParallel {
		return dst, nil
	}
	dst = appendKey(dst, first, "tool_choice")
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, '"')
	if name != "" {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, name)
	}
	if noParallel && typ != "none" {
		dst = append(dst, `,"disable_parallel_tool_use":true`...)
	}
	return append(dst, '}'), nil
}

// anthropicContent writes user (or tool result) content: a string as it
// is, parts as content blocks.
func anthropicContent(dst []byte, parts []part) ([]byte, error) {
	if t, ok := singleText(parts); ok {
		return appendStr(dst, t), nil
	}
	dst = append(dst, '[')
	n := 0
	for _, p := range parts {
		if p.kind != "image" && isEmpty(p.text) {
			continue // Anthropic rejects empty text blocks
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if p.kind != "image" {
			dst = append(dst, `{"type":"text","text":`...)
			dst = appendStr(dst, p.text)
			dst = append(dst, '}')
			continue
		}
		u := p.url.String()
		if mt, data, ok := dataURI(u); ok {
			if !anthropicImageTypes[mt] {
				return dst, errf(p.path()+".image_url.url", "anthropic takes jpeg, png, gif and webp images, not %s", mt)
			}
			dst = append(dst, `{"type":"image","source":{"type":"base64","media_type":`...)
			dst = appendString(dst, mt)
			dst = append(dst, `,"data":`...)
			dst = appendString(dst, data)
			dst = append(dst, "}}"...)
		} else if isHTTP(u) {
			dst = append(dst, `{"type":"image","source":{"type":"url","url":`...)
			dst = appendStr(dst, p.url)
			dst = append(dst, "}}"...)
		} else {
			return dst, errf(p.path()+".image_url.url", "must be an http(s) URL or a base64 data URI")
		}
	}
	return append(dst, ']'), nil
}

// anthropicAssistant writes an assistant turn: text blocks then tool_use
// blocks.
func anthropicAssistant(dst []byte, m *msg) ([]byte, error) {
	if len(m.toolCalls) == 0 {
		if t, ok := singleText(m.parts); ok {
			return appendStr(dst, t), nil
		}
	}
	dst = append(dst, '[')
	n := 0
	for _, p := range m.parts {
		if isEmpty(p.text) {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"type":"text","text":`...)
		dst = appendStr(dst, p.text)
		dst = append(dst, '}')
	}
	for _, tc := range m.toolCalls {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = appendStr(dst, tc.id)
		dst = append(dst, `,"name":`...)
		dst = appendStr(dst, tc.name)
		dst = append(dst, `,"input":`...)
		dst = append(dst, tc.args...)
		dst = append(dst, '}')
	}
	if n == 0 {
		return dst, errf(m.path()+".content", "anthropic rejects an empty assistant turn")
	}
	return append(dst, ']'), nil
}

// anthropicResult translates a Message.
func anthropicResult(dst []byte, r gjson.Result, m Meta) ([]byte, error) {
	content := r.Get("content")
	if !content.IsArray() {
		return dst, errf("", "an Anthropic message needs a content array")
	}
	id := r.Get("id")
	if id.Type != gjson.String || id.Str == "" {
		id = gjson.Result{Type: gjson.String, Str: m.ID}
	}
	model := r.Get("model")
	if model.Type != gjson.String || model.Str == "" {
		model = gjson.Result{Type: gjson.String, Str: m.Model}
	}
	var text strings.Builder
	hasText := false
	var calls []byte
	nCalls := 0
	var err error
	content.ForEach(func(_, b gjson.Result) bool {
		switch b.Get("type").String() {
		case "text":
			t := b.Get("text")
			if t.Type != gjson.String {
				err = errf("", "a text block without text")
				return false
			}
			text.WriteString(t.Str)
			hasText = true
		case "tool_use":
			name, input := b.Get("name"), b.Get("input")
			if name.Type != gjson.String || name.Str == "" || !input.IsObject() {
				err = errf("", "a tool_use block needs a name and an input object")
				return false
			}
			if name.Str == formatTool {
				var buf bytes.Buffer
				if json.Compact(&buf, []byte(input.Raw)) != nil {
					buf.Reset()
					buf.WriteString(input.Raw)
				}
				text.Write(buf.Bytes())
				hasText = true
				return true
			}
			if nCalls > 0 {
				calls = append(calls, ',')
			}
			callID := b.Get("id").String()
			if callID == "" {
				callID = "call_" + itoa(nCalls)
			}
			nCalls++
			calls = append(calls, `{"id":`...)
			calls = appendString(calls, callID)
			calls = append(calls, `,"type":"function","function":{"name":`...)
			calls = appendStr(calls, name)
			calls = append(calls, `,"arguments":`...)
			calls = appendJSONString(calls, input.Raw)
			calls = append(calls, "}}"...)
		}
		return true
	})
	if err != nil {
		return dst, err
	}
	finish := "stop"
	switch r.Get("stop_reason").String() {
	case "max_tokens", "model_context_window_exceeded":
		finish = "length"
	case "refusal":
		finish = "content_filter"
	}
	if nCalls > 0 && finish == "stop" {
		finish = "tool_calls"
	}
	u := r.Get("usage")
	in := u.Get("input_tokens").Int() + u.Get("cache_creation_input_tokens").Int() + u.Get("cache_read_input_tokens").Int()
	out := u.Get("output_tokens").Int()
	var txt *string
	if hasText {
		s := text.String()
		txt = &s
	}
	return appendCompletion(dst, completion{id: id.String(), model: model.String(), created: m.Created,
		choices: []choice{{text: txt, calls: calls, finish: finish}}, in: in, out: out, total: in + out}), nil
}

// anthropicError translates {"type":"error","error":{"type","message"}}.
func anthropicError(dst []byte, r gjson.Result, status int) []byte {
	e := r.Get("error")
	if !e.IsObject() {
		e = r
	}
	return appendError(dst, e.Get("message").String(), e.Get("type").String(), "", r.Raw, status)
}
