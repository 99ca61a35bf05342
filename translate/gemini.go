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
var Gemini = register(&Target{Name: "gemini", request: geminiRequest, result: geminiResult, errBody: geminiError})

var imageExt = map[string]string{
	".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".gif": "image/gif",
	".webp": "image/webp", ".heic": "image/heic", ".heif": "image/heif",
}

func geminiRequest(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error) {
	const target = "gemini"
	if _, err := others(c, target, warn, nil); err != nil {
		return dst, err
	}
	imageDetail(c, target, warn)
	if present(c.logitBias) && len(c.logitBias.Map()) > 0 {
		return dst, errf("logit_bias", "gemini has no logit bias")
	}
	if err := noLogprobs(c, target); err != nil {
		return dst, err
	}
	if len(c.stop) > 5 {
		return dst, errf("stop", "gemini takes at most 5 stop sequences")
	}
	if present(c.reasoning) {
		return dst, errf("reasoning_effort", "gemini's thinking takes a budget or a level that depends on the model; no faithful mapping")
	}
	if c.parallel.Type == gjson.False && len(c.tools) > 0 {
		return dst, errf("parallel_tool_calls", "gemini cannot be told to make one function call at a time")
	}
	if present(c.user) {
		warn(Warning{Param: "user", Reason: "an end-user id for abuse monitoring; it does not change the answer"})
	}
	for _, m := range c.messages {
		if present(m.name) {
			return dst, errf(m.path()+".name", "gemini has no participant names, and the name can change the answer")
		}
	}
	// Tool results name the function; OpenAI names the call: look the
	// call up in the assistant turns before.
	names := map[string]string{}

	first := true
	dst = append(dst, '{')
	i := 0
	for ; i < len(c.messages) && (c.messages[i].role == "system" || c.messages[i].role == "developer"); i++ {
	}
	dst = appendKey(dst, &first, "contents")
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
			return dst, errf(m.path()+".role", "gemini takes system instructions only before the conversation, not after its first turn")
		case "user":
			dst = append(dst, `{"role":"user","parts":[`...)
			dst, err = geminiParts(dst, m.parts, false)
			dst = append(dst, "]}"...)
		case "assistant":
			dst = append(dst, `{"role":"model","parts":[`...)
			dst, err = geminiParts(dst, m.parts, true)
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
			dst = append(dst, "]}"...)
		case "tool":
			// Consecutive tool results form one turn.
			dst = append(dst, `{"role":"user","parts":[`...)
			for k := j; k < len(c.messages) && c.messages[k].role == "tool"; k++ {
				t := &c.messages[k]
				name, ok := names[t.toolCallID.Str]
				if !ok {
					return dst, errf(t.path()+".tool_call_id", "names no tool call of an earlier assistant message; gemini needs the function's name")
				}
				if k > j {
					dst = append(dst, ',')
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
				// A JSON object result is the response; anything else is
				// wrapped as {"content": text}.
				if s := strings.TrimSpace(text(txt)); gjson.Valid(s) && gjson.Parse(s).IsObject() {
					dst = append(dst, s...)
				} else {
					dst = append(dst, `{"content":`...)
					dst = appendStr(dst, txt)
					dst = append(dst, '}')
				}
				dst = append(dst, "}}"...)
				j = k
			}
			dst = append(dst, "]}"...)
		}
		if err != nil {
			return dst, err
		}
	}
	dst = append(dst, ']')
	if i > 0 {
		dst = appendKey(dst, &first, "systemInstruction")
		dst = append(dst, `{"parts":[`...)
		k := 0
		for _, m := range c.messages[:i] {
			for _, p := range m.parts {
				if p.kind == "image" {
					return dst, errf(p.path(), "gemini takes no images in the system instruction")
				}
				if k > 0 {
					dst = append(dst, ',')
				}
				k++
				dst = append(dst, `{"text":`...)
				dst = appendStr(dst, p.text)
				dst = append(dst, '}')
			}
		}
		dst = append(dst, "]}"...)
	}
	tools := c.tools
	if len(tools) > 0 {
		dst = appendKey(dst, &first, "tools")
		dst = append(dst, `[{"functionDeclarations":[`...)
		for k, t := range tools {
			if k > 0 {
				dst = append(dst, ',')
			}
			if t.strict.Type == gjson.True {
				warn(Warning{Param: "tools.function.strict", Reason: "gemini has no strict mode; the function's schema is still sent"})
			}
			dst = append(dst, `{"name":`...)
			dst = appendStr(dst, t.name)
			if present(t.description) {
				dst = append(dst, `,"description":`...)
				dst = appendStr(dst, t.description)
			}
			if present(t.parameters) {
				dst = append(dst, `,"parametersJsonSchema":`...)
				dst = append(dst, t.parameters.Raw...)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, "]}]"...)
		if tc := c.toolChoice; present(tc) {
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
			dst = appendKey(dst, &first, "toolConfig")
			dst = append(dst, `{"functionCallingConfig":{"mode":"`...)
			dst = append(dst, mode...)
			dst = append(dst, '"')
			if name != "" {
				dst = append(dst, `,"allowedFunctionNames":[`...)
				dst = appendString(dst, name)
				dst = append(dst, ']')
			}
			dst = append(dst, "}}"...)
		}
	}
	// generationConfig
	gfirst := true
	gen := func(key string) {
		if gfirst {
			dst = appendKey(dst, &first, "generationConfig")
			dst = append(dst, '{')
		}
		dst = appendKey(dst, &gfirst, key)
	}
	for _, f := range [...]struct {
		key string
		v   gjson.Result
	}{{"temperature", c.temperature}, {"topP", c.topP}, {"maxOutputTokens", c.maxTokens},
		{"candidateCount", c.n}, {"seed", c.seed}, {"presencePenalty", c.presence}, {"frequencyPenalty", c.frequency}} {
		if present(f.v) {
			gen(f.key)
			dst = append(dst, f.v.Raw...)
		}
	}
	if len(c.stop) > 0 {
		gen("stopSequences")
		dst = append(dst, '[')
		for k, s := range c.stop {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendStr(dst, s)
		}
		dst = append(dst, ']')
	}
	if present(c.format) && c.format.Get("type").Str != "text" {
		gen("responseMimeType")
		dst = append(dst, `"application/json"`...)
		if s := c.format.Get("json_schema.schema"); present(s) {
			gen("responseJsonSchema")
			dst = append(dst, s.Raw...)
		}
	}
	if !gfirst {
		dst = append(dst, '}')
	}
	return append(dst, '}'), nil
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
				if n > 0 {
					ch.calls = append(ch.calls, ',')
				}
				id := fc.Get("id").String()
				if id == "" {
					id = "call_" + itoa(ci) + "_" + itoa(n)
				}
				n++
				ch.calls = append(ch.calls, `{"id":`...)
				ch.calls = appendString(ch.calls, id)
				ch.calls = append(ch.calls, `,"type":"function","function":{"name":`...)
				ch.calls = appendStr(ch.calls, name)
				ch.calls = append(ch.calls, `,"arguments":`...)
				if args.IsObject() {
					ch.calls = appendJSONString(ch.calls, args.Raw)
				} else {
					ch.calls = append(ch.calls, `"{}"`...)
				}
				ch.calls = append(ch.calls, "}}"...)
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
