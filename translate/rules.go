package translate

import (
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// A target's request translation is a spec: a table of rules that says,
// parameter by parameter, what the target refuses, warns of, requires and
// bounds, checked once by spec.check; then an emitter that writes the
// native body of a request the rules let through, renaming parameters by
// a table of fields. A new target is a spec: its rules (mostly the shared
// sets below), its fields, and an emitter built from the shared writers
// (appendTurns or appendMessages for the conversation, appendTools,
// appendFields).
type spec struct {
	name  string          // the target's name in reasons
	pass  map[string]bool // other parameters (chat.set) the target takes as they are
	rules []rule          // checked in order; the first that fails is the error
	// emit writes the native body; pass holds the parameters of c.set
	// named by pass, for it to copy.
	emit func(dst []byte, c *chat, model string, pass []param) ([]byte, error)
}

// request is the spec as a Target's request function.
func (s *spec) request(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error) {
	pass, err := s.check(c, warn)
	if err != nil {
		return dst, err
	}
	return s.emit(dst, c, model, pass)
}

// check judges the parameters no common field holds (others), then checks
// the rules in order; it returns the parameters of s.pass that are set.
func (s *spec) check(c *chat, warn func(Warning)) ([]param, error) {
	pass, err := others(c, s.name, warn, s.pass)
	if err != nil {
		return nil, err
	}
	for i := range s.rules {
		if err := s.rules[i].check(c, warn); err != nil {
			return nil, err
		}
	}
	return pass, nil
}

type ruleKind uint8

const (
	refuse  ruleKind = iota // an error when it applies
	caution                 // a warning when it applies; the parameter is not sent
	require                 // an error when the parameter is absent
	within                  // an error when the number is outside [min, max]
)

// rule is one check of a request. It applies to the parameter param (when
// is given its value, and nil means "is set"), or to each message (onMsg:
// the error names param below the message's path), or to each tool
// (onTool).
type rule struct {
	param    string
	kind     ruleKind
	get      func(c *chat) gjson.Result // the parameter's value, from param
	when     func(c *chat, v gjson.Result) bool
	onMsg    func(m *msg) bool
	onTool   func(c *chat, t *tool) bool
	min, max float64
	reason   string // for within, ", got VALUE" is added
}

func (r *rule) check(c *chat, warn func(Warning)) error {
	switch {
	case r.onMsg != nil:
		for i := range c.messages {
			if m := &c.messages[i]; r.onMsg(m) {
				return &Error{Param: m.path() + "." + r.param, Reason: r.reason}
			}
		}
		return nil
	case r.onTool != nil:
		for i := range c.tools {
			if r.onTool(c, &c.tools[i]) {
				warn(Warning{Param: r.param, Reason: r.reason})
			}
		}
		return nil
	}
	v := r.get(c)
	switch r.kind {
	case require:
		if !present(v) {
			return &Error{Param: r.param, Reason: r.reason}
		}
	case within:
		if present(v) && (v.Float() < r.min || v.Float() > r.max) {
			return &Error{Param: r.param, Reason: r.reason + ", got " + v.Raw}
		}
	default:
		if r.when == nil && !present(v) || r.when != nil && !r.when(c, v) {
			return nil
		}
		if r.kind == caution {
			warn(Warning{Param: r.param, Reason: r.reason})
			return nil
		}
		return &Error{Param: r.param, Reason: r.reason}
	}
	return nil
}

// fields are the parameters rules and renames name, by their key in an
// OpenAI body ("max_tokens" is max_tokens or max_completion_tokens).
var fields = map[string]func(c *chat) gjson.Result{
	"max_tokens":          func(c *chat) gjson.Result { return c.maxTokens },
	"temperature":         func(c *chat) gjson.Result { return c.temperature },
	"top_p":               func(c *chat) gjson.Result { return c.topP },
	"n":                   func(c *chat) gjson.Result { return c.n },
	"seed":                func(c *chat) gjson.Result { return c.seed },
	"presence_penalty":    func(c *chat) gjson.Result { return c.presence },
	"frequency_penalty":   func(c *chat) gjson.Result { return c.frequency },
	"logit_bias":          func(c *chat) gjson.Result { return c.logitBias },
	"logprobs":            func(c *chat) gjson.Result { return c.logprobs },
	"top_logprobs":        func(c *chat) gjson.Result { return c.topLogprobs },
	"response_format":     func(c *chat) gjson.Result { return c.format },
	"tool_choice":         func(c *chat) gjson.Result { return c.toolChoice },
	"parallel_tool_calls": func(c *chat) gjson.Result { return c.parallel },
	"user":                func(c *chat) gjson.Result { return c.user },
	"reasoning_effort":    func(c *chat) gjson.Result { return c.reasoning },
}

// field returns the getter of an OpenAI parameter; one that no field holds
// (stop, image_url.detail) reads as absent: its rule's when looks at c.
func field(param string) func(c *chat) gjson.Result {
	if f, ok := fields[param]; ok {
		return f
	}
	return func(*chat) gjson.Result { return gjson.Result{} }
}

// refused is a rule that refuses param when when holds (nil: when set).
func refused(param string, when func(c *chat, v gjson.Result) bool, reason string) rule {
	return rule{param: param, kind: refuse, get: field(param), when: when, reason: reason}
}

// warned is a rule that leaves param out with a warning when when holds
// (nil: when set).
func warned(param string, when func(c *chat, v gjson.Result) bool, reason string) rule {
	return rule{param: param, kind: caution, get: field(param), when: when, reason: reason}
}

// required is a rule that refuses a request without param.
func required(param, reason string) rule {
	return rule{param: param, kind: require, get: field(param), reason: reason}
}

// bounded is a rule that refuses a number param outside [min, max].
func bounded(param string, min, max float64, reason string) rule {
	return rule{param: param, kind: within, get: field(param), min: min, max: max, reason: reason}
}

// The conditions of rules.
func nonZero(_ *chat, v gjson.Result) bool  { return present(v) && v.Float() != 0 }
func nonEmpty(_ *chat, v gjson.Result) bool { return present(v) && len(v.Map()) > 0 }
func isTrue(_ *chat, v gjson.Result) bool   { return v.Type == gjson.True }
func notOne(_ *chat, v gjson.Result) bool   { return present(v) && v.Int() != 1 }
func anyStop(c *chat, _ gjson.Result) bool  { return len(c.stop) > 0 }
func serialTools(c *chat, _ gjson.Result) bool {
	return c.parallel.Type == gjson.False && len(c.tools) > 0
}
func named(m *msg) bool                { return present(m.name) }
func strictTool(_ *chat, t *tool) bool { return t.strict.Type == gjson.True }

// Rules most targets share.

// noPenalties refuses presence and frequency penalties other than 0 and a
// non-empty logit_bias.
func noPenalties(target string) []rule {
	return []rule{
		refused("presence_penalty", nonZero, target+" has no presence penalty"),
		refused("frequency_penalty", nonZero, target+" has no frequency penalty"),
		noLogitBias(target),
	}
}

func noLogitBias(target string) rule {
	return refused("logit_bias", nonEmpty, target+" has no logit bias")
}

// noLogprobs refuses log probabilities, which no target returns through
// sluice.
func noLogprobs(target string) []rule {
	why := target + " does not return log probabilities through sluice"
	return []rule{refused("logprobs", isTrue, why), refused("top_logprobs", nonZero, why)}
}

// oneChoice refuses n > 1.
func oneChoice(target string) rule {
	return refused("n", notOne, target+" returns one choice per request; n must be 1")
}

// noDetail warns of image_url.detail low or high, once per request: the
// target has no knob for it and sizes images itself.
func noDetail(target string) rule {
	return warned("image_url.detail", func(c *chat, _ gjson.Result) bool {
		for i := range c.messages {
			for _, p := range c.messages[i].parts {
				if p.kind == "image" && (p.detail == "low" || p.detail == "high") {
					return true
				}
			}
		}
		return false
	}, target+" has no image detail setting; it sizes images itself")
}

// userLeftOut warns that the end-user id is not sent.
var userLeftOut = warned("user", nil, "an end-user id for abuse monitoring; it does not change the answer")

// noNames refuses a message's participant name (a name some targets have
// no field for; the who parameter says whose, e.g. "Workers AI").
func noNames(who string, on func(m *msg) bool) rule {
	return rule{param: "name", kind: refuse, onMsg: on,
		reason: who + " has no participant names, and the name can change the answer"}
}

// noStrict warns, once per strict tool, that the target has no strict
// mode.
func noStrict(reason string, on func(c *chat, t *tool) bool) rule {
	return rule{param: "tools.function.strict", kind: caution, onTool: on, reason: reason}
}

// rules joins rules and sets of rules, in order.
func rules(rs ...[]rule) []rule { return slices.Concat(rs...) }

// one makes single rules a set, for rules.
func one(r ...rule) []rule { return r }

// ---- renames ----

// rename is an OpenAI parameter sent as it is under the target's key.
type rename struct {
	key string // the target's key
	get func(c *chat) gjson.Result
}

// renames pairs OpenAI parameters with the target's keys: from, to,
// from, to, ...
func renames(pairs ...string) []rename {
	out := make([]rename, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, rename{key: pairs[i+1], get: fields[pairs[i]]})
	}
	return out
}

// appendFields writes each set parameter of rs as "key":value.
func appendFields(dst []byte, first *bool, c *chat, rs []rename) []byte {
	for _, r := range rs {
		if v := r.get(c); present(v) {
			dst = appendKey(dst, first, r.key)
			dst = append(dst, v.Raw...)
		}
	}
	return dst
}

// ---- writers the emitters share ----

// openBody opens a native body that names its model: {"model":MODEL (the
// next key is written after a comma).
func openBody(dst []byte, model string) []byte {
	dst = append(dst, `{"model":`...)
	return appendString(dst, model)
}

// appendStrings writes a JSON array of gjson strings.
func appendStrings(dst []byte, ss []gjson.Result) []byte {
	dst = append(dst, '[')
	for k, s := range ss {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = appendStr(dst, s)
	}
	return append(dst, ']')
}

// toolShape is how a target writes a function tool.
type toolShape struct {
	open     string // up to the name, e.g. `{"name":`
	params   string // the key of the schema, e.g. `,"input_schema":`
	noParams string // the schema sent for a tool without one ("": none)
	strict   bool   // strict is sent as it is
	close    string
}

// appendTools writes a JSON array of tools.
func appendTools(dst []byte, tools []tool, s *toolShape) []byte {
	dst = append(dst, '[')
	for k, t := range tools {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, s.open...)
		dst = appendStr(dst, t.name)
		if present(t.description) {
			dst = append(dst, `,"description":`...)
			dst = appendStr(dst, t.description)
		}
		switch {
		case present(t.parameters):
			dst = append(dst, s.params...)
			dst = append(dst, t.parameters.Raw...)
		case s.noParams != "":
			dst = append(dst, s.params...)
			dst = append(dst, s.noParams...)
		}
		if s.strict && present(t.strict) {
			dst = append(dst, `,"strict":`...)
			dst = append(dst, t.strict.Raw...)
		}
		dst = append(dst, s.close...)
	}
	return append(dst, ']')
}

// appendCallName writes the part of an OpenAI tool call between its id
// and its arguments string: ,"type":"function","function":{"name":NAME,"arguments":
// (the caller has written {"id":ID before, and writes the arguments and
// "}}" after).
func appendCallName(dst []byte, name gjson.Result) []byte {
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendStr(dst, name)
	return append(dst, `,"arguments":`...)
}

// leadingSystem counts the system and developer messages the
// conversation starts with.
func leadingSystem(c *chat) int {
	i := 0
	for i < len(c.messages) && (c.messages[i].role == "system" || c.messages[i].role == "developer") {
		i++
	}
	return i
}

// appendSystemParts writes the text parts of system messages as a JSON
// array of blocks opened by open (`{"text":`, say); an image is refused
// with reason.
func appendSystemParts(dst []byte, ms []msg, open, reason string) ([]byte, error) {
	dst = append(dst, '[')
	n := 0
	for _, m := range ms {
		for _, p := range m.parts {
			if p.kind == "image" {
				return dst, &Error{Param: p.path(), Reason: reason}
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = append(dst, open...)
			dst = appendStr(dst, p.text)
			dst = append(dst, '}')
		}
	}
	return append(dst, ']'), nil
}

// turns is how a target that takes the system prompt apart (Anthropic,
// Gemini) writes the conversation: user and assistant turns, and the
// results of tool calls.
type turns struct {
	target    string
	user      string                                   // opens a user turn
	assistant string                                   // opens an assistant turn
	close     string                                   // closes a user or assistant turn
	results   string                                   // opens the turn of consecutive tool results (closed by "]}")
	content   func(dst []byte, m *msg) ([]byte, error) // a user message's content
	reply     func(dst []byte, m *msg) ([]byte, error) // an assistant message's content
	result    func(dst []byte, m *msg) ([]byte, error) // one tool result
}

// appendTurns writes the messages from the first after the leading system
// ones as a JSON array of turns. A system message there is an error; the
// consecutive tool messages are one turn, as these APIs want the results
// of parallel calls together.
func appendTurns(dst []byte, c *chat, from int, t *turns) ([]byte, error) {
	dst = append(dst, '[')
	for j := from; j < len(c.messages); j++ {
		m := &c.messages[j]
		if j > from {
			dst = append(dst, ',')
		}
		var err error
		switch m.role {
		case "system", "developer":
			return dst, &Error{Param: m.path() + ".role", Reason: t.target + " takes system instructions only before the conversation, not after its first turn"}
		case "user":
			dst = append(dst, t.user...)
			dst, err = t.content(dst, m)
			dst = append(dst, t.close...)
		case "assistant":
			dst = append(dst, t.assistant...)
			dst, err = t.reply(dst, m)
			dst = append(dst, t.close...)
		case "tool":
			dst = append(dst, t.results...)
			for k := j; err == nil && k < len(c.messages) && c.messages[k].role == "tool"; k++ {
				if k > j {
					dst = append(dst, ',')
				}
				dst, err = t.result(dst, &c.messages[k])
				j = k
			}
			dst = append(dst, "]}"...)
		}
		if err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

// chatStyle is how a target that takes OpenAI-shaped messages (Mistral,
// Together, Workers AI) writes them.
type chatStyle struct {
	developer bool                                     // the developer role is kept, not made system
	content   func(dst []byte, m *msg) ([]byte, error) // writes "content":… (or nothing)
	id        func(dst []byte, id gjson.Result) []byte // writes a tool call id
}

// appendMessages writes the messages as OpenAI-shaped messages. The
// rules have refused the names the target does not take: a name left is
// sent.
func appendMessages(dst []byte, c *chat, s *chatStyle) ([]byte, error) {
	dst = append(dst, '[')
	for i := range c.messages {
		m := &c.messages[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		role := m.role
		if role == "developer" && !s.developer {
			role = "system"
		}
		dst = append(dst, `{"role":"`...)
		dst = append(dst, role...)
		dst = append(dst, '"')
		var err error
		if dst, err = s.content(dst, m); err != nil {
			return dst, err
		}
		if present(m.name) {
			dst = append(dst, `,"name":`...)
			dst = appendStr(dst, m.name)
		}
		if m.role == "tool" {
			dst = append(dst, `,"tool_call_id":`...)
			dst = s.id(dst, m.toolCallID)
		}
		if len(m.toolCalls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			for k, tc := range m.toolCalls {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"id":`...)
				dst = s.id(dst, tc.id)
				dst = appendCallName(dst, tc.name)
				dst = appendString(dst, tc.args)
				dst = append(dst, "}}"...)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// idAsWritten writes a tool call id as the request has it.
func idAsWritten(dst []byte, id gjson.Result) []byte { return appendStr(dst, id) }

// isBlank reports whether s is empty or only whitespace.
func isBlank(s gjson.Result) bool { return strings.TrimSpace(s.String()) == "" }
