package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Gemini's fake model, its error envelope and the google.rpc.Status codes
// of per-line errors.

// gemStatusName is the google.rpc.Code name Google's JSON errors carry in
// error.status for an HTTP status.
var gemStatusName = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	405: "INVALID_ARGUMENT", 409: "ALREADY_EXISTS", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
	499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
	504: "DEADLINE_EXCEEDED",
}

// gemGRPCCode is the numeric google.rpc.Code of a status name, as a
// google.rpc.Status (per-line errors, an Operation's error) carries it.
var gemGRPCCode = map[string]int{
	"CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
	"ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
	"DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

// gemErrorStatus writes Google's envelope {"error":{"code","message","status"}}
// with status name name ("": the name of the HTTP status).
func gemErrorStatus(w http.ResponseWriter, status int, name, msg string, details ...any) {
	if name == "" {
		name = gemStatusName[status]
	}
	if name == "" {
		name = "UNKNOWN"
	}
	e := map[string]any{"code": status, "message": msg, "status": name}
	if len(details) > 0 {
		e["details"] = details
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// gemPart is one part of a Content; only text is read by the fake model.
type gemContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

func (c gemContent) text() string {
	var sb strings.Builder
	for i, p := range c.Parts {
		if i > 0 && p.Text != "" {
			sb.WriteByte('\n')
		}
		sb.WriteString(p.Text)
	}
	return sb.String()
}

// gemRequest is the part of a GenerateContentRequest the fake model reads;
// the API's JSON parser takes camelCase and snake_case alike.
type gemRequest struct {
	Contents    *[]gemContent `json:"contents"`
	System      *gemContent   `json:"systemInstruction"`
	SystemSnake *gemContent   `json:"system_instruction"`
	GenConfig   *gemGenConfig `json:"generationConfig"`
	GenConfigSn *gemGenConfig `json:"generation_config"`
	Tools       []gemTool     `json:"tools"`
	ToolConfig  *gemToolConf  `json:"toolConfig"`
	ToolConfSn  *gemToolConf  `json:"tool_config"`
}

// gemTool is a Tool: only its function declarations' names are read.
type gemTool struct {
	Decls   []struct{ Name string } `json:"functionDeclarations"`
	DeclsSn []struct{ Name string } `json:"function_declarations"`
}

// gemToolConf is a ToolConfig's function calling config.
type gemToolConf struct {
	FC   *gemFCConfig `json:"functionCallingConfig"`
	FCSn *gemFCConfig `json:"function_calling_config"`
}

type gemFCConfig struct {
	Mode      string   `json:"mode"`
	Allowed   []string `json:"allowedFunctionNames"`
	AllowedSn []string `json:"allowed_function_names"`
}

// forcedFunction is the function a request forces (function calling mode
// ANY: one of allowedFunctionNames, else of the declared functions), or "".
func (r *gemRequest) forcedFunction() string {
	tc := r.ToolConfig
	if tc == nil {
		tc = r.ToolConfSn
	}
	if tc == nil {
		return ""
	}
	fc := tc.FC
	if fc == nil {
		fc = tc.FCSn
	}
	if fc == nil || fc.Mode != "ANY" {
		return ""
	}
	if names := append(fc.Allowed, fc.AllowedSn...); len(names) > 0 {
		return names[0]
	}
	for _, t := range r.Tools {
		for _, d := range append(t.Decls, t.DeclsSn...) {
			if d.Name != "" {
				return d.Name
			}
		}
	}
	return ""
}

type gemGenConfig struct {
	MaxOutputTokens      int64  `json:"maxOutputTokens"`
	MaxOutputTokensSnake int64  `json:"max_output_tokens"`
	CandidateCount       int    `json:"candidateCount"`
	CandidateCountSnake  int    `json:"candidate_count"`
	MimeType             string `json:"responseMimeType"`
	MimeTypeSnake        string `json:"response_mime_type"`
}

// runGemini executes one GenerateContentRequest for model ("models/x" or
// "x"). On success body is a GenerateContentResponse; otherwise status is
// the HTTP status a direct call would get and body a google.rpc.Status
// {"code": grpc, "message"} with the status name in the returned name.
func (s *Server) runGemini(model string, req []byte) (m modelOut, statusName string) {
	bad := func(msg string) (modelOut, string) {
		return modelOut{status: 400, body: mustJSON(map[string]any{"code": 3, "message": msg})}, "INVALID_ARGUMENT"
	}
	var r gemRequest
	if err := json.Unmarshal(req, &r); err != nil {
		return bad("Invalid JSON payload received. " + err.Error())
	}
	if r.Contents == nil || len(*r.Contents) == 0 {
		return bad("* GenerateContentRequest.contents: contents is not specified\n")
	}
	sys := r.System
	if sys == nil {
		sys = r.SystemSnake
	}
	gc := r.GenConfig
	if gc == nil {
		gc = r.GenConfigSn
	}
	var maxOut int64
	n := 1
	jsonMode := false
	if gc != nil {
		maxOut = max(gc.MaxOutputTokens, gc.MaxOutputTokensSnake)
		n = max(n, gc.CandidateCount, gc.CandidateCountSnake)
		jsonMode = gc.MimeType == "application/json" || gc.MimeTypeSnake == "application/json"
	}
	var all strings.Builder
	if sys != nil {
		all.WriteString(sys.text())
	}
	var last string
	for i, c := range *r.Contents {
		switch c.Role {
		case "", "user":
			last = c.text()
		case "model", "function":
		default:
			return bad(fmt.Sprintf("* GenerateContentRequest.contents[%d].role: Please use a valid role: user, model.\n", i))
		}
		if all.Len() > 0 {
			all.WriteByte('\n')
		}
		all.WriteString(c.text())
	}
	text, cut := answer(last, maxOut)
	finish := "STOP"
	if cut {
		finish = "MAX_TOKENS"
	}
	in, out := approxTokens(all.Len()), approxTokens(len(text))*int64(n)
	// A forced function (mode ANY) is called with the answer as its
	// arguments, as Gemini answers one: a functionCall part, finishReason
	// STOP. JSON mode (responseMimeType application/json) answers with a
	// JSON value as the text.
	part := map[string]any{"text": text}
	if fn := r.forcedFunction(); fn != "" {
		part = map[string]any{"functionCall": map[string]any{"name": fn, "args": map[string]any{"echo": text}}}
	} else if jsonMode {
		part = map[string]any{"text": string(mustJSON(map[string]any{"echo": text}))}
	}
	cands := make([]any, n)
	for i := range cands {
		cands[i] = map[string]any{"content": map[string]any{"parts": []any{part}, "role": "model"},
			"finishReason": finish, "index": i}
	}
	usage := map[string]any{"totalTokenCount": in + out}
	if in > 0 {
		usage["promptTokenCount"] = in
		usage["promptTokensDetails"] = []any{map[string]any{"modality": "TEXT", "tokenCount": in}}
	}
	if out > 0 {
		usage["candidatesTokenCount"] = out
	}
	return modelOut{200, mustJSON(map[string]any{"candidates": cands, "usageMetadata": usage,
		"modelVersion": strings.TrimPrefix(model, "models/"), "responseId": b58ID(0, "gemresp", string(req), 0, 23)}), in, out}, ""
}

// gemStatusLine is the google.rpc.Status of a per-line error.
func gemStatusLine(name, msg string) map[string]any {
	return map[string]any{"code": gemGRPCCode[name], "message": msg}
}

// notRun is the result of a line that a Gemini batch or a Vertex AI job
// did not run (expired, or cancelled when undone is): no output line.
func notRun(customID, undone string) lineResult {
	return lineResult{customID: customID, dest: destNone, kind: unrun(undone)}
}

// runGeminiLine produces the result of line i ({"key","request"}) of a
// Gemini batch: {"key","response"} or {"key","status"} (the field name is
// Options.GeminiLineErrorField). Lines not run (expired, cancelled) get no
// result line: Gemini's output has responses only for requests it ran.
func (s *Server) runGeminiLine(b *batchRec, i int, line []byte, done bool, undone string) lineResult {
	var ln struct {
		Key      json.RawMessage `json:"key"`
		Request  json.RawMessage `json:"request"`
		Metadata json.RawMessage `json:"metadata"`
	}
	json.Unmarshal(line, &ln)
	var key string
	json.Unmarshal(ln.Key, &key)
	if !done {
		return notRun(key, undone)
	}
	r := lineResult{customID: key, dest: destOut, kind: outErrored}
	keyJSON := ln.Key
	if len(keyJSON) == 0 {
		keyJSON = json.RawMessage(`""`)
	}
	errLine := func(name, msg string) []byte {
		if b.Inline {
			return mustJSON(map[string]any{"error": gemStatusLine(name, msg), "metadata": ln.Metadata})
		}
		return mustJSON(map[string]any{"key": keyJSON, s.opts.GeminiLineErrorField: gemStatusLine(name, msg)})
	}
	f := s.lineFate(b, i)
	if e, ok := injectedErr(&gemLineErrs, f); ok {
		r.data = errLine(e.typ, e.msg)
		return r
	}
	m, name := s.runGemini(b.Model, ln.Request)
	r.in, r.out = m.in, m.out
	switch {
	case f == fateOmit:
		r.kind, r.dest = outOmitted, destNone
	case m.status == 200 && b.Inline:
		r.kind, r.data = outSucceeded, mustJSON(map[string]any{"response": json.RawMessage(m.body), "metadata": ln.Metadata})
	case m.status == 200:
		d := append([]byte(`{"key":`), keyJSON...)
		d = append(d, `,"response":`...)
		d = append(d, m.body...)
		r.kind, r.data = outSucceeded, append(d, '}')
	default:
		var st struct{ Message string }
		json.Unmarshal(m.body, &st)
		r.data = errLine(name, st.Message)
	}
	return r
}

// gemLineErrs are the line errors the emulator injects into Gemini's
// results (see injectedErr).
var gemLineErrs = [3]injected{
	{typ: "RESOURCE_EXHAUSTED", msg: "Resource has been exhausted (e.g. check quota). (injected by the emulator's LineErrorRate)"},
	{typ: "INTERNAL", msg: "An internal error has occurred. (injected by the emulator's LineErrorRate)"},
	{typ: "INVALID_ARGUMENT", msg: "Request contains an invalid argument. (permanent error injected by the emulator's LineErrorRate)"},
}
