package translate

import "github.com/tidwall/gjson"

// Cloudflare translates to and from Workers AI text generation: the input
// {messages, max_tokens, temperature, ...} of an LLM (the model is named
// by the run URL, not the body), and its output {response, tool_calls,
// usage}, or an OpenAI-shaped chat completion for the models that answer
// in that shape.
var Cloudflare = register(&Target{Name: "cloudflare", request: cloudflareSpec.request, result: cloudflareResult, errBody: cloudflareError})

var cloudflareSpec = spec{name: "cloudflare", emit: cloudflareEmit, rules: rules(
	one(noDetail("cloudflare"), noLogitBias("cloudflare")),
	noLogprobs("cloudflare"),
	one(
		oneChoice("cloudflare"),
		refused("stop", anyStop, "Workers AI text generation takes no stop sequences"),
		refused("reasoning_effort", nil, "has no equivalent on cloudflare"),
		refused("parallel_tool_calls", serialTools, "Workers AI cannot be told to make one tool call at a time"),
		userLeftOut,
		refused("tool_choice", func(_ *chat, tc gjson.Result) bool {
			return present(tc) && (tc.Type != gjson.String || tc.Str != "auto" && tc.Str != "none")
		}, "Workers AI takes no tool_choice; only auto and none can be honoured"),
		noNames("Workers AI", named),
		noStrict("Workers AI has no strict mode; the tool's schema is still sent", func(c *chat, t *tool) bool {
			return strictTool(c, t) && !noTools(c)
		}),
	))}

// noTools reports whether tool_choice is none: the model cannot call what
// it is not given, so the tools are not sent.
func noTools(c *chat) bool { return c.toolChoice.Type == gjson.String && c.toolChoice.Str == "none" }

var cloudflareFields = renames("max_tokens", "max_tokens", "temperature", "temperature", "top_p", "top_p", "seed", "seed",
	"presence_penalty", "presence_penalty", "frequency_penalty", "frequency_penalty")

var cloudflareTool = toolShape{open: `{"type":"function","function":{"name":`, params: `,"parameters":`,
	noParams: `{"type":"object","properties":{}}`, close: "}}"}

var cloudflareStyle = chatStyle{id: idAsWritten, content: func(dst []byte, m *msg) ([]byte, error) {
	dst = append(dst, `,"content":`...)
	return cloudflareContent(dst, m.parts)
}}

func cloudflareEmit(dst []byte, c *chat, _ string, _ []param) ([]byte, error) {
	first := true
	dst = append(dst, '{')
	dst = appendKey(dst, &first, "messages")
	dst, err := appendMessages(dst, c, &cloudflareStyle)
	if err != nil {
		return dst, err
	}
	dst = appendFields(dst, &first, c, cloudflareFields)
	switch c.format.Get("type").Str {
	case "json_object":
		dst = appendKey(dst, &first, "response_format")
		dst = append(dst, `{"type":"json_object"}`...)
	case "json_schema":
		// Workers AI's JSON mode takes the schema itself in json_schema.
		dst = appendKey(dst, &first, "response_format")
		dst = append(dst, `{"type":"json_schema","json_schema":`...)
		if s := c.format.Get("json_schema.schema"); present(s) {
			dst = append(dst, s.Raw...)
		} else {
			dst = append(dst, `{"type":"object"}`...)
		}
		dst = append(dst, '}')
	}
	if len(c.tools) > 0 && !noTools(c) {
		dst = appendKey(dst, &first, "tools")
		dst = appendTools(dst, c.tools, &cloudflareTool)
	}
	return append(dst, '}'), nil
}

// cloudflareContent writes a message's content: one text as a string,
// else OpenAI-shaped parts (text, and images as data URIs: Workers AI
// fetches no URLs).
func cloudflareContent(dst []byte, parts []part) ([]byte, error) {
	if t, ok := singleText(parts); ok {
		return appendStr(dst, t), nil
	}
	if len(parts) == 0 {
		return append(dst, `""`...), nil
	}
	dst = append(dst, '[')
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, ',')
		}
		if p.kind != "image" {
			dst = append(dst, `{"type":"text","text":`...)
			dst = appendStr(dst, p.text)
			dst = append(dst, '}')
			continue
		}
		if _, _, ok := dataURI(p.url.String()); !ok {
			return dst, errf(p.path()+".image_url.url", "Workers AI takes images as base64 data URIs only, not URLs")
		}
		dst = append(dst, `{"type":"image_url","image_url":{"url":`...)
		dst = appendStr(dst, p.url)
		dst = append(dst, "}}"...)
	}
	return append(dst, ']'), nil
}

// cloudflareResult translates a text generation output.
func cloudflareResult(dst []byte, r gjson.Result, m Meta) ([]byte, error) {
	if r.Get("choices").Exists() {
		return openAIResult(dst, r, m)
	}
	resp := r.Get("response")
	calls := r.Get("tool_calls")
	if !resp.Exists() && !calls.Exists() {
		return dst, errf("", "a Workers AI text generation output needs response or tool_calls")
	}
	var ch choice
	switch {
	case resp.Type == gjson.String:
		s := resp.Str
		ch.text = &s
	case resp.IsObject() || resp.IsArray():
		// JSON mode answers with the JSON value itself.
		s := compact(resp.Raw)
		ch.text = &s
	case !present(resp):
	default:
		s := resp.String()
		ch.text = &s
	}
	n := 0
	var err error
	if present(calls) && !calls.IsArray() {
		return dst, errf("", "tool_calls must be an array")
	}
	arr(calls).ForEach(func(_, tc gjson.Result) bool {
		name, args := tc.Get("name"), tc.Get("arguments")
		if !name.Exists() { // OpenAI-shaped call
			name, args = tc.Get("function.name"), tc.Get("function.arguments")
		}
		if name.Type != gjson.String || name.Str == "" {
			err = errf("", "a tool call needs a name")
			return false
		}
		id := tc.Get("id").String()
		if id == "" {
			id = "call_" + itoa(n)
		}
		n++
		ch.calls = appendCall(ch.calls, id, name, args)
		return true
	})
	if err != nil {
		return dst, err
	}
	ch.finish = "stop"
	if n > 0 {
		ch.finish = "tool_calls"
	}
	u := r.Get("usage")
	return appendCompletion(dst, completion{id: m.ID, model: m.Model, created: m.Created, choices: []choice{ch},
		in: u.Get("prompt_tokens").Int(), out: u.Get("completion_tokens").Int(), total: u.Get("total_tokens").Int()}), nil
}

// cloudflareError translates {"error": …} or {"errors":[…]} of a failed
// item (as provider/cloudflare reports it).
func cloudflareError(dst []byte, r gjson.Result, status int) []byte {
	e := r.Get("error")
	if !e.Exists() {
		e = r.Get("errors.0")
	}
	if e.Type == gjson.String {
		return appendError(dst, e.Str, "cloudflare_error", "", r.Raw, status)
	}
	return appendError(dst, e.Get("message").String(), "cloudflare_error", e.Get("code").String(), r.Raw, status)
}
