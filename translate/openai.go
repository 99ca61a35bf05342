package translate

import (
	"hash/fnv"
	"regexp"

	"github.com/tidwall/gjson"
)

// Mistral and Together take OpenAI-shaped chat requests and answer with
// chat completions: their translation renames what differs, rejects what
// they do not take, and normalizes the answer.
var (
	Mistral  = register(&Target{Name: "mistral", request: mistralSpec.request, result: openAIResult, errBody: openAIError})
	Together = register(&Target{Name: "together", request: togetherSpec.request, result: openAIResult, errBody: openAIError})
)

var mistralSpec = spec{name: "mistral", pass: map[string]bool{"prediction": true},
	emit: compatEmitter(&mistralStyle, renames("temperature", "temperature", "top_p", "top_p", "seed", "random_seed", "n", "n",
		"presence_penalty", "presence_penalty", "frequency_penalty", "frequency_penalty", "response_format", "response_format",
		"tool_choice", "tool_choice", "parallel_tool_calls", "parallel_tool_calls", "reasoning_effort", "reasoning_effort")),
	rules: rules(
		one(noLogitBias("mistral")),
		noLogprobs("mistral"),
		one(
			refused("reasoning_effort", nil, "has no equivalent on mistral"),
			userLeftOut,
			noNames("mistral", func(m *msg) bool { return present(m.name) && m.role != "tool" }),
		))}

var togetherSpec = spec{name: "together",
	emit: compatEmitter(&togetherStyle, renames("temperature", "temperature", "top_p", "top_p", "seed", "seed", "n", "n",
		"presence_penalty", "presence_penalty", "frequency_penalty", "frequency_penalty", "response_format", "response_format",
		"tool_choice", "tool_choice", "parallel_tool_calls", "parallel_tool_calls", "logit_bias", "logit_bias",
		"reasoning_effort", "reasoning_effort")),
	rules: rules(noLogprobs("together"), one(userLeftOut))}

var (
	mistralStyle  = chatStyle{content: compatContent, id: func(dst []byte, id gjson.Result) []byte { return appendString(dst, mistralToolID(id.Str)) }}
	togetherStyle = chatStyle{content: compatContent, id: func(dst []byte, id gjson.Result) []byte { return appendString(dst, id.Str) }}
	compatTool    = toolShape{open: `{"type":"function","function":{"name":`, params: `,"parameters":`, strict: true, close: "}}"}
)

// compatContent writes a message's content as it is; an assistant
// message without content or tool calls has a refusal, sent as its text.
func compatContent(dst []byte, m *msg) ([]byte, error) {
	if present(m.content) {
		dst = append(dst, `,"content":`...)
		return append(dst, m.content.Raw...), nil
	}
	if len(m.toolCalls) == 0 {
		dst = append(dst, `,"content":`...)
		dst = appendStr(dst, m.parts[0].text)
	}
	return dst, nil
}

// compatEmitter writes an OpenAI-shaped body for a target whose messages
// are written in style and whose sampling parameters are fields.
func compatEmitter(style *chatStyle, fields []rename) func([]byte, *chat, string, []param) ([]byte, error) {
	return func(dst []byte, c *chat, model string, pass []param) ([]byte, error) {
		first := false
		dst = openBody(dst, model)
		dst = appendKey(dst, &first, "messages")
		dst, _ = appendMessages(dst, c, style) // compatContent never fails
		if present(c.maxTokens) {
			dst = appendKey(dst, &first, "max_tokens")
			dst = append(dst, c.maxTokens.Raw...)
		}
		if len(c.stop) > 0 {
			dst = appendKey(dst, &first, "stop")
			dst = appendStrings(dst, c.stop)
		}
		dst = appendFields(dst, &first, c, fields)
		if len(c.tools) > 0 {
			dst = appendKey(dst, &first, "tools")
			dst = appendTools(dst, c.tools, &compatTool)
		}
		for _, p := range pass {
			dst = appendKey(dst, &first, p.key)
			dst = append(dst, p.val.Raw...)
		}
		return append(dst, '}'), nil
	}
}

var mistralIDForm = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)

// mistralToolID maps a tool call id to the form Mistral requires (nine
// letters and digits): the same id always maps to the same form, so calls
// and their results still pair up.
func mistralToolID(id string) string {
	if mistralIDForm.MatchString(id) {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	v := h.Sum64()
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var b [9]byte
	for i := range b {
		b[i] = digits[v%62]
		v /= 62
	}
	return string(b[:])
}
