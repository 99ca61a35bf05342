package translate

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// chat is an OpenAI chat completions request, read but not decoded: each
// field is the raw value in the body (Type gjson.Null when absent or null).
type chat struct {
	messages []msg

	maxTokens     gjson.Result // max_completion_tokens, else max_tokens
	maxTokensName string       // which of the two it was
	temperature   gjson.Result
	topP          gjson.Result
	stop          []gjson.Result // stop sequences, a string made a list of one
	n             gjson.Result
	seed          gjson.Result
	presence      gjson.Result
	frequency     gjson.Result
	logitBias     gjson.Result
	logprobs      gjson.Result
	topLogprobs   gjson.Result
	format        gjson.Result // response_format
	tools         []tool
	toolChoice    gjson.Result
	parallel      gjson.Result // parallel_tool_calls
	user          gjson.Result // user, else safety_identifier
	reasoning     gjson.Result // reasoning_effort

	// set lists the other keys present, for the targets to judge.
	set []param
}

// param is a key of the body that no common field holds.
type param struct {
	key string
	val gjson.Result
}

// msg is one message of "messages".
type msg struct {
	idx        int    // its index in messages
	role       string // system, developer, user, assistant, tool
	content    gjson.Result
	parts      []part // content as parts (a string is one text part)
	name       gjson.Result
	toolCalls  []toolCall
	toolCallID gjson.Result
}

// part is one content part.
type part struct {
	mi, pi int          // messages[mi].content[pi]; pi partContent: .content; partRefusal: .refusal
	kind   string       // text, refusal, image
	text   gjson.Result // text and refusal parts
	url    gjson.Result // image parts: image_url.url
	detail string       // image parts: image_url.detail
}

const (
	partContent = -1
	partRefusal = -2
)

// msgPath is the body path of message i (built only for errors).
func msgPath(i int) string { return "messages[" + strconv.Itoa(i) + "]" }

func (m *msg) path() string { return msgPath(m.idx) }

func (p *part) path() string {
	switch p.pi {
	case partContent:
		return msgPath(p.mi) + ".content"
	case partRefusal:
		return msgPath(p.mi) + ".refusal"
	}
	return msgPath(p.mi) + ".content[" + strconv.Itoa(p.pi) + "]"
}

// toolCall is one of an assistant message's tool_calls.
type toolCall struct {
	path string
	id   gjson.Result
	name gjson.Result
	args string // the arguments JSON object, decoded from its string
}

// tool is one function tool definition.
type tool struct {
	path        string
	name        gjson.Result
	description gjson.Result
	parameters  gjson.Result
	strict      gjson.Result
}

// arr returns r if it is an array, else an absent value (gjson's ForEach
// calls its iterator once for a value that is not an array or object).
func arr(r gjson.Result) gjson.Result {
	if r.IsArray() {
		return r
	}
	return gjson.Result{}
}

// present reports whether r holds a value (absent and null do not).
func present(r gjson.Result) bool { return r.Exists() && r.Type != gjson.Null }

// parseValid reads a body known to be valid JSON into c, checking what
// every target needs: the shapes of messages, content parts, tool calls
// and tools.
func parseValid(body []byte, c *chat) error {
	if len(body) == 0 {
		return errf("", "body must be a JSON object")
	}
	// The values read point into body, which outlives c: no copy.
	raw := unsafe.String(&body[0], len(body))
	if i := skipWS(raw, 0); i >= len(raw) || raw[i] != '{' {
		return errf("", "body must be a JSON object")
	}
	var err error
	var maxTokens, maxCompletion gjson.Result
	var user, safety gjson.Result
	membersAt(raw, skipWS(raw, 0), func(key string, at int) (int, bool) {
		if key == "messages" && raw[at] == '[' {
			// Read in place: the messages are most of the body.
			end, merr := parseMessages(raw, at, c)
			err = merr
			return end, err == nil
		}
		v, end := value(raw, at)
		return end, chatParam(c, key, v, &err, &maxTokens, &maxCompletion, &user, &safety)
	})
	if err != nil {
		return err
	}
	if c.messages == nil {
		return errf("messages", "is required (an array of at least one message)")
	}
	return finishChat(c, maxTokens, maxCompletion, user, safety)
}

// chatParam reads one top-level parameter into c.
func chatParam(c *chat, key string, v gjson.Result, errp *error, maxTokens, maxCompletion, user, safety *gjson.Result) bool {
	var err error
	defer func() { *errp = err }()
	{
		if v.Type == gjson.Null {
			return true // null is the default of every optional parameter
		}
		switch key {
		case "model":
		case "messages":
			err = errf("messages", "must be an array")
		case "max_tokens":
			*maxTokens = v
		case "max_completion_tokens":
			*maxCompletion = v
		case "temperature":
			c.temperature, err = number(key, v)
		case "top_p":
			c.topP, err = number(key, v)
		case "presence_penalty":
			c.presence, err = number(key, v)
		case "frequency_penalty":
			c.frequency, err = number(key, v)
		case "seed":
			c.seed, err = integer(key, v)
		case "n":
			c.n, err = integer(key, v)
		case "top_logprobs":
			c.topLogprobs, err = integer(key, v)
		case "stop":
			err = parseStop(v, c)
		case "logit_bias":
			if !v.IsObject() {
				err = errf(key, "must be an object")
			}
			c.logitBias = v
		case "logprobs", "parallel_tool_calls", "stream", "store":
			if v.Type != gjson.True && v.Type != gjson.False {
				err = errf(key, "must be a boolean")
			}
			switch key {
			case "logprobs":
				c.logprobs = v
			case "parallel_tool_calls":
				c.parallel = v
			default:
				c.set = append(c.set, param{key, v})
			}
		case "response_format":
			err = checkFormat(v)
			c.format = v
		case "tools":
			err = parseTools(v, c)
		case "tool_choice":
			c.toolChoice = v
		case "user":
			*user = v
		case "safety_identifier":
			*safety = v
		case "reasoning_effort":
			c.reasoning = v
		case "modalities", "audio", "metadata", "service_tier", "verbosity", "web_search_options",
			"prediction", "stream_options", "prompt_cache_key", "prompt_cache_retention",
			"prompt_cache_options", "moderation", "functions", "function_call":
			c.set = append(c.set, param{key, v})
		default:
			err = errf(key, "is not an OpenAI chat completions parameter sluice knows how to translate")
		}
		return err == nil
	}
}

// finishChat checks what depends on several parameters.
func finishChat(c *chat, maxTokens, maxCompletion, user, safety gjson.Result) error {
	switch {
	case present(maxCompletion) && present(maxTokens) && maxCompletion.Raw != maxTokens.Raw:
		return errf("max_completion_tokens", "and max_tokens disagree; set one")
	case present(maxCompletion):
		c.maxTokens, c.maxTokensName = maxCompletion, "max_completion_tokens"
	case present(maxTokens):
		c.maxTokens, c.maxTokensName = maxTokens, "max_tokens"
	}
	if present(c.maxTokens) {
		if _, err := integer(c.maxTokensName, c.maxTokens); err != nil {
			return err
		}
		if c.maxTokens.Int() < 1 {
			return errf(c.maxTokensName, "must be at least 1")
		}
	}
	if present(c.toolChoice) && len(c.tools) == 0 {
		if s := c.toolChoice.String(); c.toolChoice.Type != gjson.String || (s != "none" && s != "auto") {
			return errf("tool_choice", "is set but there are no tools")
		}
	}
	c.user = user
	if !present(user) {
		c.user = safety
	}
	if present(c.user) && c.user.Type != gjson.String {
		return errf("user", "must be a string")
	}
	return nil
}

func number(key string, v gjson.Result) (gjson.Result, error) {
	if v.Type != gjson.Number {
		return v, errf(key, "must be a number")
	}
	return v, nil
}

func integer(key string, v gjson.Result) (gjson.Result, error) {
	if v.Type != gjson.Number {
		return v, errf(key, "must be an integer")
	}
	if _, err := strconv.ParseInt(v.Raw, 10, 64); err != nil {
		return v, errf(key, "must be an integer")
	}
	return v, nil
}

func parseStop(v gjson.Result, c *chat) error {
	switch {
	case v.Type == gjson.String:
		c.stop = append(c.stop, v)
	case v.IsArray():
		var err error
		v.ForEach(func(_, s gjson.Result) bool {
			if s.Type != gjson.String {
				err = errf("stop", "must be a string or an array of strings")
				return false
			}
			c.stop = append(c.stop, s)
			return true
		})
		return err
	default:
		return errf("stop", "must be a string or an array of strings")
	}
	return nil
}

func checkFormat(v gjson.Result) error {
	if !v.IsObject() {
		return errf("response_format", "must be an object")
	}
	switch t := v.Get("type").String(); t {
	case "text", "json_object":
	case "json_schema":
		s := v.Get("json_schema")
		if !s.IsObject() {
			return errf("response_format.json_schema", "must be an object")
		}
		if n := s.Get("name"); n.Type != gjson.String || n.Str == "" {
			return errf("response_format.json_schema.name", "is required")
		}
		if sc := s.Get("schema"); present(sc) && !sc.IsObject() {
			return errf("response_format.json_schema.schema", "must be an object")
		}
	default:
		return errf("response_format.type", "must be text, json_object or json_schema, got %q", t)
	}
	return nil
}

func parseTools(v gjson.Result, c *chat) error {
	if !v.IsArray() {
		return errf("tools", "must be an array")
	}
	var err error
	i := 0
	v.ForEach(func(_, t gjson.Result) bool {
		path := "tools[" + strconv.Itoa(i) + "]"
		i++
		if typ := t.Get("type").String(); typ != "function" {
			err = errf(path+".type", "only function tools can be translated, got %q", typ)
			return false
		}
		f := t.Get("function")
		tl := tool{path: path, name: f.Get("name"), description: f.Get("description"),
			parameters: f.Get("parameters"), strict: f.Get("strict")}
		switch {
		case tl.name.Type != gjson.String || tl.name.Str == "":
			err = errf(path+".function.name", "is required")
		case present(tl.parameters) && !tl.parameters.IsObject():
			err = errf(path+".function.parameters", "must be an object")
		case present(tl.description) && tl.description.Type != gjson.String:
			err = errf(path+".function.description", "must be a string")
		case tl.name.Str == formatTool:
			err = errf(path+".function.name", "%q is reserved by sluice for response_format", formatTool)
		}
		c.tools = append(c.tools, tl)
		return err == nil
	})
	return err
}

// parseMessages reads the messages array starting at raw[at] and returns
// the index past it.
func parseMessages(raw string, at int, c *chat) (int, error) {
	var err error
	i := 0
	c.messages = c.messages[:0]
	end := elementsAt(raw, at, func(at int) (int, bool) {
		idx := i
		i++
		if raw[at] != '{' {
			_, end := value(raw, at)
			err = errf(msgPath(idx), "must be an object")
			return end, false
		}
		c.messages = append(c.messages, msg{idx: idx})
		var end int
		end, err = parseMessage(&c.messages[len(c.messages)-1], raw, at)
		return end, err == nil
	})
	if err == nil && len(c.messages) == 0 {
		return end, errf("messages", "must hold at least one message")
	}
	return end, err
}

// parseMessage reads the message object starting at raw[at] and returns
// the index past it.
func parseMessage(mm *msg, raw string, at int) (int, error) {
	var err error
	var refusal gjson.Result
	end := membersAt(raw, at, func(key string, at int) (int, bool) {
		v, end := value(raw, at)
		return end, messageField(mm, key, v, &refusal, &err)
	})
	if err != nil {
		return end, err
	}
	return end, checkMessage(mm, refusal)
}

// messageField reads one field of a message.
func messageField(mm *msg, key string, v gjson.Result, refusal *gjson.Result, errp *error) bool {
	var err error
	defer func() { *errp = err }()
	{
		if v.Type == gjson.Null {
			return true
		}
		switch key {
		case "role":
			mm.role = v.Str
		case "content":
			mm.content = v
		case "name":
			mm.name = v
		case "tool_call_id":
			mm.toolCallID = v
		case "tool_calls":
			mm.toolCalls, err = parseToolCalls(mm.path(), v)
		case "refusal":
			// The assistant's refusal text of an earlier turn: kept as text.
			if v.Type != gjson.String {
				err = errf(mm.path()+".refusal", "must be a string")
			} else if !isEmpty(v) {
				*refusal = v
			}
		case "function_call":
			err = errf(mm.path()+".function_call", "the deprecated function_call is not translated; use tool_calls")
		case "audio":
			err = errf(mm.path()+".audio", "audio is not translated")
		default:
			err = errf(mm.path()+"."+key, "is not a field of a chat message")
		}
		return err == nil
	}
}

// checkMessage checks a message read whole and splits its content into
// parts.
func checkMessage(mm *msg, refusal gjson.Result) error {
	switch mm.role {
	case "system", "developer", "user", "assistant":
	case "tool":
		if mm.toolCallID.Type != gjson.String || mm.toolCallID.Str == "" {
			return errf(mm.path()+".tool_call_id", "is required on a tool message")
		}
	case "":
		return errf(mm.path()+".role", "is required")
	case "function":
		return errf(mm.path()+".role", "the deprecated function role is not translated; use tool")
	default:
		return errf(mm.path()+".role", "unknown role %q", mm.role)
	}
	if present(mm.name) && mm.name.Type != gjson.String {
		return errf(mm.path()+".name", "must be a string")
	}
	switch c := mm.content; {
	case !present(c):
		if mm.role != "assistant" {
			return errf(mm.path()+".content", "is required on a %s message", mm.role)
		}
	case c.Type == gjson.String:
		mm.parts = append(mm.parts, part{mi: mm.idx, pi: partContent, kind: "text", text: c})
	case c.IsArray():
		j := 0
		var perr error
		elements(c.Raw, func(p gjson.Result) bool {
			var pt part
			pt, perr = parsePart(mm.idx, j, mm.role, p)
			j++
			mm.parts = append(mm.parts, pt)
			return perr == nil
		})
		if perr != nil {
			return perr
		}
	default:
		return errf(mm.path()+".content", "must be a string or an array of content parts")
	}
	if present(refusal) {
		mm.parts = append(mm.parts, part{mi: mm.idx, pi: partRefusal, kind: "refusal", text: refusal})
	}
	if mm.role == "assistant" && len(mm.parts) == 0 && len(mm.toolCalls) == 0 {
		return errf(mm.path(), "an assistant message needs content or tool_calls")
	}
	return nil
}

func parsePart(mi, pi int, role string, p gjson.Result) (part, error) {
	at := part{mi: mi, pi: pi}
	path := at.path
	if !p.IsObject() {
		return part{}, errf(path(), "must be an object")
	}
	var typ string
	var t gjson.Result
	members(p.Raw, func(k string, v gjson.Result) bool {
		switch k {
		case "type":
			typ = v.Str
		case "text":
			t = v
		}
		return true
	})
	switch typ {
	case "text":
		if t.Type != gjson.String {
			return part{}, errf(path()+".text", "must be a string")
		}
		at.kind, at.text = "text", t
		return at, nil
	case "refusal":
		t := p.Get("refusal")
		if role != "assistant" || t.Type != gjson.String {
			return part{}, errf(path(), "a refusal part belongs to an assistant message and holds a string")
		}
		at.kind, at.text = "refusal", t
		return at, nil
	case "image_url":
		if role != "user" {
			return part{}, errf(path(), "images are allowed in user messages only")
		}
		iu := p.Get("image_url")
		u := iu.Get("url")
		if u.Type != gjson.String || u.Str == "" {
			return part{}, errf(path()+".image_url.url", "is required")
		}
		d := iu.Get("detail").String()
		switch d {
		case "", "auto", "low", "high":
		default:
			return part{}, errf(path()+".image_url.detail", "must be auto, low or high")
		}
		at.kind, at.url, at.detail = "image", u, d
		return at, nil
	case "input_audio":
		return part{}, errf(path(), "audio input is not translated")
	case "file":
		return part{}, errf(path(), "file parts are not translated")
	default:
		return part{}, errf(path()+".type", "unknown content part type %q", typ)
	}
}

func parseToolCalls(path string, v gjson.Result) ([]toolCall, error) {
	if !v.IsArray() {
		return nil, errf(path+".tool_calls", "must be an array")
	}
	var out []toolCall
	var err error
	i := 0
	v.ForEach(func(_, tc gjson.Result) bool {
		p := path + ".tool_calls[" + strconv.Itoa(i) + "]"
		i++
		if t := tc.Get("type").String(); t != "function" {
			err = errf(p+".type", "only function tool calls can be translated, got %q", t)
			return false
		}
		c := toolCall{path: p, id: tc.Get("id"), name: tc.Get("function.name")}
		args := tc.Get("function.arguments")
		switch {
		case c.id.Type != gjson.String || c.id.Str == "":
			err = errf(p+".id", "is required")
		case c.name.Type != gjson.String || c.name.Str == "":
			err = errf(p+".function.name", "is required")
		case args.Type != gjson.String:
			err = errf(p+".function.arguments", "must be a string holding a JSON object")
		default:
			c.args = strings.TrimSpace(args.String())
			if c.args == "" {
				c.args = "{}"
			}
			if !gjson.Valid(c.args) || !gjson.Parse(c.args).IsObject() {
				err = errf(p+".function.arguments", "is not a JSON object, which the target needs")
			}
		}
		out = append(out, c)
		return err == nil
	})
	return out, err
}

// dataURI splits a data: URI into its media type and base64 data.
func dataURI(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, enc, _ := strings.Cut(meta, ";")
	if enc != "base64" && !strings.HasSuffix(meta, ";base64") {
		return "", "", false
	}
	return strings.ToLower(mediaType), data, mediaType != "" && data != ""
}

// isHTTP reports whether u is an http(s) URL.
func isHTTP(u string) bool {
	return strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")
}

// singleText returns the text of parts that are exactly one text (or
// refusal) part.
func singleText(parts []part) (gjson.Result, bool) {
	if len(parts) == 1 && parts[0].kind != "image" {
		return parts[0].text, true
	}
	return gjson.Result{}, false
}

// formatTool is the name of the tool Anthropic is made to call to answer
// in JSON (response_format); its input is the answer.
const formatTool = "sluice_response_format"
