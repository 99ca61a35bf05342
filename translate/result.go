package translate

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// completion is what a chat.completion is written from.
type completion struct {
	id, model      string
	created        int64
	choices        []choice
	in, out, total int64
}

type choice struct {
	text   *string // nil: null content
	calls  []byte  // the tool_calls array's items, comma-separated; empty: none
	finish string
}

// appendCompletion writes an OpenAI chat.completion object.
func appendCompletion(dst []byte, c completion) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, c.id)
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = appendInt(dst, c.created)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, c.model)
	dst = append(dst, `,"choices":[`...)
	for i, ch := range c.choices {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = appendInt(dst, int64(i))
		dst = append(dst, `,"message":{"role":"assistant","content":`...)
		if ch.text == nil {
			dst = append(dst, "null"...)
		} else {
			dst = appendString(dst, *ch.text)
		}
		dst = append(dst, `,"refusal":null`...)
		if len(ch.calls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			dst = append(dst, ch.calls...)
			dst = append(dst, ']')
		}
		dst = append(dst, `},"logprobs":null,"finish_reason":`...)
		dst = appendString(dst, ch.finish)
		dst = append(dst, '}')
	}
	if c.in < 0 {
		c.in = 0
	}
	if c.out < 0 {
		c.out = 0
	}
	if c.total < c.in+c.out {
		c.total = c.in + c.out
	}
	dst = append(dst, `],"usage":{"prompt_tokens":`...)
	dst = appendInt(dst, c.in)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, c.out)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, c.total)
	return append(dst, "}}"...)
}

// appendError writes an OpenAI error object. A missing message names the
// status and quotes the native body (cut short).
func appendError(dst []byte, message, typ, code, raw string, status int) []byte {
	if message == "" {
		if len(raw) > 500 {
			raw = raw[:500] + "..."
		}
		message = "HTTP " + strconv.Itoa(status)
		if raw != "" {
			message += ": " + raw
		}
	}
	if typ == "" {
		typ = "provider_error"
	}
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, message)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	if code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendString(dst, code)
	}
	return append(dst, "}}"...)
}

func itoa(n int) string { return strconv.Itoa(n) }

// appendCall appends an OpenAI tool call to calls, the comma-separated
// items of a tool_calls array. The arguments are a JSON string: a string
// as it is, an object compacted, anything else "{}".
func appendCall(calls []byte, id string, name, args gjson.Result) []byte {
	if len(calls) > 0 {
		calls = append(calls, ',')
	}
	calls = append(calls, `{"id":`...)
	calls = appendString(calls, id)
	calls = appendCallName(calls, name)
	switch {
	case args.Type == gjson.String:
		calls = appendStr(calls, args)
	case args.IsObject():
		calls = appendJSONString(calls, args.Raw)
	default:
		calls = append(calls, `"{}"`...)
	}
	return append(calls, "}}"...)
}

// openAIResult normalizes an answer that is already a chat.completion
// (Mistral, Together, Workers AI models with an OpenAI-shaped output):
// the fields the contract names are checked and written again, content
// given as parts is joined into a string, and missing ids, models, times
// and usage are filled from m.
func openAIResult(dst []byte, r gjson.Result, m Meta) ([]byte, error) {
	chs := r.Get("choices")
	if !chs.IsArray() {
		return dst, errf("", "a chat completion needs a choices array")
	}
	c := completion{id: r.Get("id").String(), model: r.Get("model").String(), created: r.Get("created").Int()}
	if c.id == "" {
		c.id = m.ID
	}
	if c.model == "" {
		c.model = m.Model
	}
	if c.created <= 0 {
		c.created = m.Created
	}
	var err error
	chs.ForEach(func(_, ch gjson.Result) bool {
		msg := ch.Get("message")
		if !msg.IsObject() {
			err = errf("", "a choice needs a message object")
			return false
		}
		var out choice
		switch ct := msg.Get("content"); {
		case ct.Type == gjson.String:
			s := ct.Str
			out.text = &s
		case ct.IsArray():
			var s []byte
			has := false
			arr(ct).ForEach(func(_, p gjson.Result) bool {
				if t := p.Get("type").String(); t == "text" || t == "output_text" {
					s = append(s, p.Get("text").String()...)
					has = true
				}
				return true
			})
			if has {
				str := string(s)
				out.text = &str
			}
		case !present(ct):
		default:
			err = errf("", "message content must be a string, parts or null")
			return false
		}
		n := 0
		tcs := msg.Get("tool_calls")
		if present(tcs) && !tcs.IsArray() {
			err = errf("", "tool_calls must be an array")
			return false
		}
		if !tcs.IsArray() {
			tcs = gjson.Result{}
		}
		tcs.ForEach(func(_, tc gjson.Result) bool {
			name := tc.Get("function.name")
			if name.Type != gjson.String || name.Str == "" {
				err = errf("", "a tool call needs a function name")
				return false
			}
			id := tc.Get("id").String()
			if id == "" {
				id = "call_" + itoa(n)
			}
			n++
			out.calls = appendCall(out.calls, id, name, tc.Get("function.arguments"))
			return true
		})
		if err != nil {
			return false
		}
		switch f := ch.Get("finish_reason").String(); f {
		case "stop", "length", "tool_calls", "content_filter":
			out.finish = f
		case "model_length":
			out.finish = "length"
		default:
			out.finish = "stop"
			if n > 0 {
				out.finish = "tool_calls"
			}
		}
		c.choices = append(c.choices, out)
		return true
	})
	if err != nil {
		return dst, err
	}
	if len(c.choices) == 0 {
		return dst, errf("", "a chat completion needs at least one choice")
	}
	u := r.Get("usage")
	c.in, c.out, c.total = u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int(), u.Get("total_tokens").Int()
	return appendCompletion(dst, c), nil
}

// openAIError normalizes an OpenAI-shaped error, {"error":{...}}, or
// {"message","type","code"} at the top (Mistral), or {"error":"text"}.
func openAIError(dst []byte, r gjson.Result, status int) []byte {
	e := r.Get("error")
	switch {
	case e.Type == gjson.String:
		return appendError(dst, e.Str, "", r.Get("code").String(), r.Raw, status)
	case !e.IsObject():
		e = r
	}
	msg := e.Get("message").String()
	if msg == "" {
		if d := e.Get("detail"); d.Exists() { // Mistral's 422
			msg = d.Raw
		}
	}
	return appendError(dst, msg, e.Get("type").String(), e.Get("code").String(), r.Raw, status)
}
