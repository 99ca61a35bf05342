package httpx

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// ErrorDecoder reads a provider's error body into a code (its error code or
// type) and a message. It returns empty strings for a body it does not
// recognise; the client then shows the start of the body.
type ErrorDecoder func(body []byte) (code, message string)

// OpenAIErrors decodes {"error":{"message","type","param","code"}} (and the
// {"error":"text"} some compatible providers send). The code is error.code,
// else error.type.
func OpenAIErrors(body []byte) (code, message string) {
	e := gjson.GetBytes(body, "error")
	if e.Type == gjson.String {
		return "", e.String()
	}
	if !e.IsObject() {
		return "", ""
	}
	code = e.Get("code").String()
	if code == "" {
		code = e.Get("type").String()
	}
	message = e.Get("message").String()
	if p := e.Get("param"); p.Type == gjson.String && p.String() != "" {
		message += " (param " + p.String() + ")"
	}
	return code, message
}

// MistralErrors decodes Mistral's error bodies (docs/providers/mistral.md):
// 422 {"detail":[{"loc":[…],"msg","type"}]} (the code is the first
// entry's type, the message joins every entry's loc and msg), {"detail":
// "text"}, {"object":"error","message","type","code"}, {"message":"text"},
// and the OpenAI envelope.
func MistralErrors(body []byte) (code, message string) {
	if d := gjson.GetBytes(body, "detail"); d.IsArray() {
		var msgs []string
		d.ForEach(func(_, e gjson.Result) bool {
			if code == "" {
				code = e.Get("type").String()
			}
			var loc []string
			for _, l := range e.Get("loc").Array() {
				loc = append(loc, l.String())
			}
			m := e.Get("msg").String()
			if len(loc) > 0 {
				m = strings.Join(loc, ".") + ": " + m
			}
			msgs = append(msgs, m)
			return true
		})
		return code, strings.Join(msgs, "; ")
	} else if d.Type == gjson.String {
		return "", d.String()
	}
	if m := gjson.GetBytes(body, "message"); m.Type == gjson.String {
		code = gjson.GetBytes(body, "code").String()
		if code == "" {
			code = gjson.GetBytes(body, "type").String()
		}
		return code, m.String()
	}
	return OpenAIErrors(body)
}

// AnthropicErrors decodes {"type":"error","error":{"type","message"}}.
func AnthropicErrors(body []byte) (code, message string) {
	e := gjson.GetBytes(body, "error")
	if !e.IsObject() {
		return "", ""
	}
	return e.Get("type").String(), e.Get("message").String()
}

// CloudflareErrors decodes {"success":false,"errors":[{"code","message"}]}.
// The code is the first error's; the message joins every error's.
func CloudflareErrors(body []byte) (code, message string) {
	errs := gjson.GetBytes(body, "errors")
	if !errs.IsArray() {
		return "", ""
	}
	var msgs []string
	errs.ForEach(func(_, e gjson.Result) bool {
		c := e.Get("code").String()
		if code == "" {
			code = c
		}
		m := e.Get("message").String()
		if c != "" {
			m = c + ": " + m
		}
		msgs = append(msgs, m)
		return true
	})
	return code, strings.Join(msgs, "; ")
}

// redactor removes credentials from text that may echo a request (an error
// page listing the request's headers, a proxy's diagnostic, ...).
type redactor struct{ secrets []string }

const redacted = "[REDACTED]"

var (
	// header-like assignments of credentials: "Authorization: Bearer x",
	// "x-api-key": "x", api-key=x, ...
	credHeader = regexp.MustCompile(`(?i)((?:authorization|proxy-authorization|x-api-key|api-key|x-goog-api-key|cf-aig-authorization)["']?\s*[:=]\s*["']?)(?:(?:bearer|basic|token)\s+)?[^\s"',;}\]]+`)
	bearer     = regexp.MustCompile(`(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+`)
	keyLike    = regexp.MustCompile(`\b(sk-ant-|sk-proj-|sk-)[A-Za-z0-9_-]{8,}`)
)

func newRedactor(secrets ...string) redactor {
	var r redactor
	for _, s := range secrets {
		if len(s) >= 4 {
			r.secrets = append(r.secrets, s)
		}
	}
	return r
}

// String returns s without credentials.
func (r redactor) String(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	s = credHeader.ReplaceAllString(s, "${1}"+redacted)
	s = bearer.ReplaceAllString(s, "${1}"+redacted)
	return keyLike.ReplaceAllString(s, redacted)
}

// snippet is the start of a body, as printable text, for errors whose body
// the decoder does not know.
func snippet(b []byte, max int) string {
	if len(b) > max {
		b = b[:max]
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1] // a rune cut by the limit
		}
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	return s
}
