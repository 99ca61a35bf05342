package splitter

import "strings"

// Token estimate (see the package doc): the text of body's string values,
// ASCII bytes divided by a per-model bytes-per-token factor, plus one token
// per non-ASCII character (two for characters outside the BMP, such as
// emoji), plus 4 tokens per message (each "role" key) and 3 per request.

const (
	tokensPerMessage = 4
	tokensPerRequest = 3
)

// excludedKey reports keys whose string values are not counted as text:
// identifiers, enums and URLs/base64 payloads rather than prose.
func excludedKey(k []byte) bool {
	switch string(k) {
	case "model", "role", "type", "url", "id", "tool_call_id", "user", "detail",
		"encoding_format", "service_tier", "media_type", "data", "image_url", "reasoning_effort":
		return true
	}
	return false
}

// bytesPerToken10 is a model's ASCII bytes per token, in tenths. 4.0 is
// what an exact tokenizer (o200k/cl100k) gives on English prose; Claude's
// tokenizer cuts text finer.
func bytesPerToken10(model string) int64 {
	switch {
	case strings.HasPrefix(model, "claude"):
		return 35
	}
	return 40
}

// tokens turns text counts into a token estimate for model.
func tokens(model string, ascii, nonASCII, roles int64) int64 {
	f := bytesPerToken10(model)
	return (ascii*10+f-1)/f + nonASCII + roles*tokensPerMessage + tokensPerRequest
}

// EstimateTokens estimates the input tokens of a request body (the JSON
// object of an input line's "body"), with the bytes-per-token factor of
// its body.model. It does not allocate for bodies without escaped keys.
// A body that is not valid JSON is estimated as its length / 4.
func EstimateTokens(body []byte) int64 {
	var s scanner
	s.reset(body)
	s.ws()
	if s.i >= len(body) || body[s.i] != '{' {
		return int64(len(body)+3) / 4
	}
	s.count = true
	if !s.object(kindBody) {
		return int64(len(body)+3) / 4
	}
	model := ""
	if f := s.fields[keyModel]; f.typ == '"' && !f.esc {
		model = string(body[f.start+1 : f.end-1])
	}
	return tokens(model, s.ascii, s.nonASCII, s.roles)
}
