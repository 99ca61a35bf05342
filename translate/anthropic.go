package translate

import (
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// Anthropic translates to and from the Messages API (the params of a
// Message Batches request).
var Anthropic = register(&Target{Name: "anthropic", request: anthropicSpec.request, result: anthropicResult, errBody: anthropicError})

var anthropicImageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

var anthropicSpec = spec{name: "anthropic", emit: anthropicEmit, rules: rules(
	one(noDetail("anthropic")),
	noPenalties("anthropic"),
	noLogprobs("anthropic"),
	one(
		oneChoice("anthropic"),
		required("max_tokens", "anthropic requires max_tokens (or max_completion_tokens) on every request"),
		bounded("temperature", 0, 1, "anthropic takes 0 to 1"),
		bounded("top_p", 0, 1, "must be between 0 and 1"),
		refused("reasoning_effort", nil, "anthropic's extended thinking takes a token budget, not an effort; no faithful mapping"),
		warned("seed", nil, "anthropic has no seed; the answer is sampled the same way without it"),
		refused("response_format", func(c *chat, _ gjson.Result) bool { return jsonMode(c) && len(c.tools) > 0 },
			"anthropic answers in JSON through a forced tool call, which cannot be combined with tools"),
		noNames("anthropic", named),
		refused("stop", func(c *chat, _ gjson.Result) bool { return slices.ContainsFunc(c.stop, isBlank) },
			"anthropic rejects stop sequences that are empty or only whitespace"),
		noStrict("anthropic has no strict mode; the tool's schema is still sent and followed", strictTool),
	))}

var anthropicSampling = renames("temperature", "temperature", "top_p", "top_p")

var anthropicTool = toolShape{open: `{"name":`, params: `,"input_schema":`, noParams: `{"type":"object","properties":{}}`, close: "}"}

var anthropicTurns = turns{target: "anthropic",
	user: `{"role":"user","content":`, assistant: `{"role":"assistant","content":`, close: "}",
	results: `{"role":"user","content":[`,
	content: func(dst []byte, m *msg) ([]byte, error) { return anthropicContent(dst, m.parts) },
	reply:   anthropicAssistant,
	result: func(dst []byte, t *msg) ([]byte, error) {
		dst = append(dst, `{"type":"tool_result","tool_use_id":`...)
		dst = appendStr(dst, t.toolCallID)
		dst = append(dst, `,"content":`...)
		dst, err := anthropicContent(dst, t.parts)
		return append(dst, '}'), err
	},
}

// jsonMode reports whether the request wants a JSON answer.
func jsonMode(c *chat) bool { return present(c.format) && c.format.Get("type").Str != "text" }

func anthropicEmit(dst []byte, c *chat, model string, _ []param) ([]byte, error) {
	first := false
	dst = openBody(dst, model)
	dst = appendKey(dst, &first, "max_tokens")
	dst = append(dst, c.maxTokens.Raw...)
	// System and developer messages go to "system"; they must come first.
	sys := leadingSystem(c)
	var err error
	if sys > 0 {
		dst = appendKey(dst, &first, "system")
		if t, ok := singleText(c.messages[0].parts); sys == 1 && ok {
			dst = appendStr(dst, t)
		} else if dst, err = appendSystemParts(dst, c.messages[:sys], `{"type":"text","text":`, "anthropic takes no images in the system prompt"); err != nil {
			return dst, err
		}
	}
	dst = appendKey(dst, &first, "messages")
	if dst, err = appendTurns(dst, c, sys, &anthropicTurns); err != nil {
		return dst, err
	}
	if len(c.stop) > 0 {
		dst = appendKey(dst, &first, "stop_sequences")
		dst = appendStrings(dst, c.stop)
	}
	dst = appendFields(dst, &first, c, anthropicSampling)
	if present(c.user) {
		dst = appendKey(dst, &first, "metadata")
		dst = append(dst, `{"user_id":`...)
		dst = appendStr(dst, c.user)
		dst = append(dst, '}')
	}
	if len(c.tools) > 0 {
		dst = appendKey(dst, &first, "tools")
		dst = appendTools(dst, c.tools, &anthropicTool)
		if dst, err = anthropicToolChoice(dst, &first, c); err != nil {
			return dst, err
		}
	}
	if jsonMode(c) {
		if dst, err = anthropicFormat(dst, &first, c.format); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// anthropicFormat writes JSON mode: a tool whose input schema is the
// wanted answer, and a tool_choice that forces it; Result turns its input
// back into the message content.
func anthropicFormat(dst []byte, first *bool, format gjson.Result) ([]byte, error) {
	schema := `{"type":"object"}`
	desc := "Give the answer as this tool's input."
	if format.Get("type").Str == "json_schema" {
		js := format.Get("json_schema")
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
	dst = appendKey(dst, first, "tools")
	dst = append(dst, `[{"name":"`+formatTool+`","description":`...)
	dst = appendString(dst, desc)
	dst = append(dst, `,"input_schema":`...)
	dst = append(dst, schema...)
	dst = append(dst, `}]`...)
	dst = appendKey(dst, first, "tool_choice")
	return append(dst, `{"type":"tool","name":"`+formatTool+`"}`...), nil
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
				text.WriteString(compact(input.Raw))
				hasText = true
				return true
			}
			callID := b.Get("id").String()
			if callID == "" {
				callID = "call_" + itoa(nCalls)
			}
			nCalls++
			calls = appendCall(calls, callID, name, input)
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
