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
	Mistral = register(&Target{Name: "mistral", request: func(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error) {
		return compatRequest(dst, c, model, warn, &mistralDialect)
	}, result: openAIResult, errBody: openAIError})
	Together = register(&Target{Name: "together", request: func(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error) {
		return compatRequest(dst, c, model, warn, &togetherDialect)
	}, result: openAIResult, errBody: openAIError})
)

// dialect is how an OpenAI-compatible chat API differs from OpenAI's.
type dialect struct {
	name      string
	seed      string          // the seed's key
	pass      map[string]bool // other parameters taken as they are
	logitBias bool
	reasoning bool
	names     bool // user and assistant messages may carry a name
	developer bool // the developer role is known
	toolIDs   func(string) string
}

var mistralDialect = dialect{
	name: "mistral", seed: "random_seed",
	pass:    map[string]bool{"prediction": true},
	toolIDs: mistralToolID,
}

var togetherDialect = dialect{
	name: "together", seed: "seed",
	logitBias: true, reasoning: true, names: true,
}

func compatRequest(dst []byte, c *chat, model string, warn func(Warning), d *dialect) ([]byte, error) {
	pass, err := others(c, d.name, warn, d.pass)
	if err != nil {
		return dst, err
	}
	if !d.logitBias && present(c.logitBias) && len(c.logitBias.Map()) > 0 {
		return dst, errf("logit_bias", "%s has no logit bias", d.name)
	}
	if err := noLogprobs(c, d.name); err != nil {
		return dst, err
	}
	if !d.reasoning && present(c.reasoning) {
		return dst, errf("reasoning_effort", "has no equivalent on %s", d.name)
	}
	if present(c.user) {
		warn(Warning{Param: "user", Reason: "an end-user id for abuse monitoring; it does not change the answer"})
	}
	ids := d.toolIDs
	if ids == nil {
		ids = func(s string) string { return s }
	}

	first := true
	dst = append(dst, '{')
	dst = appendKey(dst, &first, "model")
	dst = appendString(dst, model)
	dst = appendKey(dst, &first, "messages")
	dst = append(dst, '[')
	for i := range c.messages {
		m := &c.messages[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		role := m.role
		if role == "developer" && !d.developer {
			role = "system"
		}
		dst = append(dst, `{"role":"`...)
		dst = append(dst, role...)
		dst = append(dst, '"')
		if present(m.content) {
			dst = append(dst, `,"content":`...)
			dst = append(dst, m.content.Raw...)
		} else if len(m.toolCalls) == 0 {
			// An assistant refusal of an earlier turn: its text.
			dst = append(dst, `,"content":`...)
			dst = appendStr(dst, m.parts[0].text)
		}
		if present(m.name) {
			if !d.names && m.role != "tool" {
				return dst, errf(m.path()+".name", "%s has no participant names, and the name can change the answer", d.name)
			}
			if d.names || m.role == "tool" {
				dst = append(dst, `,"name":`...)
				dst = appendStr(dst, m.name)
			}
		}
		if m.role == "tool" {
			dst = append(dst, `,"tool_call_id":`...)
			dst = appendString(dst, ids(m.toolCallID.Str))
		}
		if len(m.toolCalls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			for k, tc := range m.toolCalls {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"id":`...)
				dst = appendString(dst, ids(tc.id.Str))
				dst = append(dst, `,"type":"function","function":{"name":`...)
				dst = appendStr(dst, tc.name)
				dst = append(dst, `,"arguments":`...)
				dst = appendString(dst, tc.args)
				dst = append(dst, "}}"...)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if present(c.maxTokens) {
		dst = appendKey(dst, &first, "max_tokens")
		dst = append(dst, c.maxTokens.Raw...)
	}
	if len(c.stop) > 0 {
		dst = appendKey(dst, &first, "stop")
		dst = append(dst, '[')
		for k, s := range c.stop {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendStr(dst, s)
		}
		dst = append(dst, ']')
	}
	for _, f := range [...]struct {
		key string
		v   gjson.Result
	}{{"temperature", c.temperature}, {"top_p", c.topP}, {d.seed, c.seed}, {"n", c.n},
		{"presence_penalty", c.presence}, {"frequency_penalty", c.frequency},
		{"response_format", c.format}, {"tool_choice", c.toolChoice}, {"parallel_tool_calls", c.parallel},
		{"logit_bias", c.logitBias}, {"reasoning_effort", c.reasoning}} {
		if f.key == "logit_bias" && !d.logitBias {
			continue // empty (checked above): OpenAI's default
		}
		if present(f.v) {
			dst = appendKey(dst, &first, f.key)
			dst = append(dst, f.v.Raw...)
		}
	}
	if len(c.tools) > 0 {
		dst = appendKey(dst, &first, "tools")
		dst = append(dst, '[')
		for k, t := range c.tools {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"function","function":{"name":`...)
			dst = appendStr(dst, t.name)
			if present(t.description) {
				dst = append(dst, `,"description":`...)
				dst = appendStr(dst, t.description)
			}
			if present(t.parameters) {
				dst = append(dst, `,"parameters":`...)
				dst = append(dst, t.parameters.Raw...)
			}
			if present(t.strict) {
				dst = append(dst, `,"strict":`...)
				dst = append(dst, t.strict.Raw...)
			}
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	for _, p := range pass {
		dst = appendKey(dst, &first, p.key)
		dst = append(dst, p.val.Raw...)
	}
	return append(dst, '}'), nil
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
