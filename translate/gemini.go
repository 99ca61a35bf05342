package translate

import (
	"path"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Gemini translates to and from the Gemini API's GenerateContentRequest
// and GenerateContentResponse (the model is named by the URL, not the
// body).
var Gemini = register(&Target{Name: "gemini", request: geminiSpec.request, result: geminiResult, errBody: geminiError})

var imageExt = map[string]string{
	".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".gif": "image/gif",
	".webp": "image/webp", ".heic": "image/heic", ".heif": "image/heif",
}

var geminiSpec = spec{name: "gemini", emit: geminiEmit, rules: rules(
	one(noDetail("gemini"), noLogitBias("gemini")),
	noLogprobs("gemini"),
	one(
		refused("stop", func(c *chat, _ gjson.Result) bool { return len(c.stop) > 5 }, "gemini takes at most 5 stop sequences"),
		refused("reasoning_effort", nil, "gemini's thinking takes a budget or a level that depends on the model; no faithful mapping"),
		refused("parallel_tool_calls", serialTools, "gemini cannot be told to make one function call at a time"),
		userLeftOut,
		noNames("gemini", named),
		noStrict("gemini has no strict mode; the function's schema is still sent", strictTool),
	))}

// geminiConfig are the parameters of generationConfig sent as they are.
var geminiConfig = renames("temperature", "temperature", "top_p", "topP", "max_tokens", "maxOutputTokens",
	"n", "candidateCount", "seed", "seed", "presence_penalty", "presencePenalty", "frequency_penalty", "frequencyPenalty")

var geminiTool = toolShape{open: `{"name":`, params: `,"parametersJsonSchema":`, close: "}"}

func geminiEmit(dst []byte, c *chat, _ string, _ []param) ([]byte, error) {
	// Tool results name the function; OpenAI names the call: look the
	// call up in the assistant turns before.
	names := map[string]string{}
	sys := leadingSystem(c)
	first := true
	dst = append(dst, '{')
	dst = appendKey(dst, &first, "contents")
	dst, err := appendTurns(dst, c, sys, &turns{target: "gemini",
		user: `{"role":"user","parts":[`, assistant: `{"role":"model","parts":[`, close: "]}",
		results: `{"role":"user","parts":[`,
		content: func(dst []byte, m *msg) ([]byte, error) { return geminiParts(dst, m.parts, false) },
		reply:   func(dst []byte, m *msg) ([]byte, error) { return geminiModelTurn(dst, m, names) },
		result:  func(dst []byte, m *msg) ([]byte, error) { return geminiFunctionResponse(dst, m, names) },
	})
	if err != nil {
		return dst, err
	}
	if sys > 0 {
		dst = appendKey(dst, &first, "systemInstruction")
		dst = append(dst, `{"parts":`...)
		if dst, err = appendSystemParts(dst, c.messages[:sys], `{"text":`, "gemini takes no images in the system instruction"); err != nil {
			return dst, err
		}
		dst = append(dst, '}')
	}
	if len(c.tools) > 0 {
		dst = appendKey(dst, &first, "tools")
		dst = append(dst, `[{"functionDeclarations":`...)
		dst = appendTools(dst, c.tools, &geminiTool)
		dst = append(dst, "}]"...)
		if dst, err = geminiToolConfig(dst, &first, c.toolChoice); err != nil {
			return dst, err
		}
	}
	// generationConfig, left out when it would be empty.
	was, mark := first, len(dst)
	dst = appendKey(dst, &first, "generationConfig")
	dst = append(dst, '{')
	gfirst := true
	dst = appendFields(dst, &gfirst, c, geminiConfig)
	if len(c.stop) > 0 {
		dst = appendKey(dst, &gfirst, "stopSequences")
		dst = appendStrings(dst, c.stop)
	}
	if present(c.format) && c.format.Get("type").Str != "text" {
		dst = appendKey(dst, &gfirst, "responseMimeType")
		dst = append(dst, `"application/json"`...)
		if s := c.format.Get("json_schema.schema"); present(s) {
			dst = appendKey(dst, &gfirst, "responseJsonSchema")
			dst = append(dst, s.Raw...)
		}
	}
	if gfirst {
		dst, first = dst[:mark], was
	} else {
		dst = append(dst, '}')
	}
	return append(dst, '}'), nil
}

// geminiModelTurn writes the parts of an assistant turn: its text, then
// its function calls, whose names it records by call id.
func geminiModelTurn(dst []byte, m *msg, names map[string]string) ([]byte, error) {
	dst, err := geminiParts(dst, m.parts, true)
	if err != nil {
		return dst, err
	}
	for _, tc := range m.toolCalls {
		if dst[len(dst)-1] != '[' {
			dst = append(dst, ',')
		}
		names[tc.id.Str] = tc.name.Str
		dst = append(dst, `{"functionCall":{"name":`...)
		dst = appendStr(dst, tc.name)
		dst = append(dst, `,"args":`...)
		dst = append(dst, tc.args...)
		dst = append(dst, "}}"...)
	}
	if dst[len(dst)-1] == '[' {
		return dst, errf(m.path()+".content", "gemini rejects an empty model turn")
	}
	return dst, nil
}

// geminiFunctionResponse writes a tool message as a functionResponse
// part: a JSON object result is the response; anything else is wrapped
// as {"content": text}.
func geminiFunctionResponse(dst []byte, t *msg, names map[string]string) ([]byte, error) {
	name, ok := names[t.toolCallID.Str]
	if !ok {
		return dst, errf(t.path()+".tool_call_id", "names no tool call of an earlier assistant message; gemini needs the function's name")
	}
	dst = append(dst, `{"functionResponse":{"name":`...)
	dst = appendString(dst, name)
	dst = append(dst, `,"response":`...)
	txt, ok := singleText(t.parts)
	if !ok {
		var sb strings.Builder
		for _, p := range t.parts {
			if p.kind == "image" {
				return dst, errf(p.path(), "gemini takes no images in a function response")
			}
			sb.WriteString(text(p.text))
		}
		txt = gjson.Result{Type: gjson.String, Str: sb.String()}
	}
	if s := strings.TrimSpace(text(txt)); gjson.Valid(s) && gjson.Parse(s).IsObject() {
		dst = append(dst, s...)
	} else {
		dst = append(dst, `{"content":`...)
		dst = appendStr(dst, txt)
		dst = append(dst, '}')
	}
	return append(dst, "}}"...), nil
}

// geminiToolConfig writes toolConfig for a tool_choice.
func geminiToolConfig(dst []byte, first *bool, tc gjson.Result) ([]byte, error) {
	if !present(tc) {
		return dst, nil
	}
	mode, name := "", ""
	switch {
	case tc.Type == gjson.String && tc.Str == "none":
		mode = "NONE"
	case tc.Type == gjson.String && tc.Str == "auto":
		mode = "AUTO"
	case tc.Type == gjson.String && tc.Str == "required":
		mode = "ANY"
	case tc.IsObject() && tc.Get("type").Str == "function" && tc.Get("function.name").String() != "":
		mode, name = "ANY", tc.Get("function.name").String()
	default:
		return dst, errf("tool_choice", "only none, auto, required or a named function can be translated")
	}
	dst = appendKey(dst, first, "toolConfig")
	dst = append(dst, `{"functionCallingConfig":{"mode":"`...)
	dst = append(dst, mode...)
	dst = append(dst, '"')
	if name != "" {
		dst = append(dst, `,"allowedFunctionNames":[`...)
		dst = appendString(dst, name)
		dst = append(dst, ']')
	}
	return append(dst, "}}"...), nil
}

// geminiParts writes content parts (after an opening '[').
func geminiParts(dst []byte, parts []part, model bool) ([]byte, error) {
	n := 0
	for _, p := range parts {
		if p.kind != "image" && isEmpty(p.text) && (model || len(parts) > 1) {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if p.kind != "image" {
			dst = append(dst, `{"text":`...)
			dst = appendStr(dst, p.text)
			dst = append(dst, '}')
			continue
		}
		u := p.url.String()
		if mt, data, ok := dataURI(u); ok {
			dst = append(dst, `{"inlineData":{"mimeType":`...)
			dst = appendString(dst, mt)
			dst = append(dst, `,"data":`...)
			dst = appendString(dst, data)
			dst = append(dst, "}}"...)
			continue
		}
		if !isHTTP(u) && !strings.HasPrefix(u, "gs://") {
			return dst, errf(p.path()+".image_url.url", "must be an http(s) or gs:// URL or a base64 data URI")
		}
		dst = append(dst, `{"fileData":{`...)
		clean, _, _ := strings.Cut(u, "?")
		if mt, ok := imageExt[strings.ToLower(path.Ext(clean))]; ok {
			dst = append(dst, `"mimeType":`...)
			dst = appendString(dst, mt)
			dst = append(dst, ',')
		}
		dst = append(dst, `"fileUri":`...)
		dst = appendStr(dst, p.url)
		dst = append(dst, "}}"...)
	}
	return dst, nil
}

// geminiResult translates a GenerateContentResponse.
func geminiResult(dst []byte, r gjson.Result, m Meta) ([]byte, error) {
	cands := r.Get("candidates")
	if present(cands) && !cands.IsArray() {
		return dst, errf("", "candidates must be an array")
	}
	if !present(cands) && !r.Get("promptFeedback").Exists() && !r.Get("usageMetadata").Exists() {
		return dst, errf("", "a GenerateContentResponse needs candidates or promptFeedback")
	}
	c := completion{id: r.Get("responseId").String(), model: r.Get("modelVersion").String(), created: m.Created}
	if c.id == "" {
		c.id = m.ID
	}
	if c.model == "" {
		c.model = m.Model
	}
	if t, err := time.Parse(time.RFC3339Nano, r.Get("createTime").String()); err == nil {
		c.created = t.Unix()
	}
	var err error
	ci := 0
	arr(cands).ForEach(func(_, cand gjson.Result) bool {
		var ch choice
		var text []byte
		has := false
		n := 0
		parts := cand.Get("content.parts")
		if present(parts) && !parts.IsArray() {
			err = errf("", "content.parts must be an array")
			return false
		}
		arr(parts).ForEach(func(_, p gjson.Result) bool {
			if p.Get("thought").Bool() {
				return true // thinking is not part of the answer
			}
			if t := p.Get("text"); t.Type == gjson.String {
				text = append(text, t.Str...)
				has = true
			}
			if fc := p.Get("functionCall"); fc.Exists() {
				name := fc.Get("name")
				if name.Type != gjson.String || name.Str == "" {
					err = errf("", "a functionCall needs a name")
					return false
				}
				args := fc.Get("args")
				if !args.IsObject() {
					args = gjson.Result{} // written as "{}"
				}
				id := fc.Get("id").String()
				if id == "" {
					id = "call_" + itoa(ci) + "_" + itoa(n)
				}
				n++
				ch.calls = appendCall(ch.calls, id, name, args)
			}
			return true
		})
		if err != nil {
			return false
		}
		if has {
			s := string(text)
			ch.text = &s
		}
		switch cand.Get("finishReason").String() {
		case "MAX_TOKENS":
			ch.finish = "length"
		case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE":
			ch.finish = "content_filter"
		default:
			ch.finish = "stop"
			if n > 0 {
				ch.finish = "tool_calls"
			}
		}
		c.choices = append(c.choices, ch)
		ci++
		return true
	})
	if err != nil {
		return dst, err
	}
	if len(c.choices) == 0 {
		// The prompt was blocked: no candidate.
		c.choices = []choice{{finish: "content_filter"}}
	}
	u := r.Get("usageMetadata")
	c.in = u.Get("promptTokenCount").Int() + u.Get("toolUsePromptTokenCount").Int()
	c.out = u.Get("candidatesTokenCount").Int() + u.Get("thoughtsTokenCount").Int()
	c.total = u.Get("totalTokenCount").Int()
	return appendCompletion(dst, c), nil
}

// geminiError translates {"error":{"code","message","status"}} (or the
// status object without the wrapper, as batch output lines carry it).
func geminiError(dst []byte, r gjson.Result, status int) []byte {
	e := r.Get("error")
	if !e.IsObject() {
		e = r
	}
	return appendError(dst, e.Get("message").String(), e.Get("status").String(), e.Get("code").String(), r.Raw, status)
}
