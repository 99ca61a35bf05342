package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Mistral and Together share an input line shape, {"custom_id","body"}
// (docs/providers/mistral.md, docs/providers/together.md), and OpenAI's
// model endpoints; this file scans and runs such lines.

// bodyScan bounds the scan of a {custom_id, body} input file.
type bodyScan struct {
	maxBytes    int64
	maxRequests int
	maxCustomID int    // 0: any length
	jobModel    string // used for lines without body.model
}

// scanBodyLines validates an input file of {custom_id, body} lines and
// collects its request count, model and estimated input tokens. A line may
// carry method and url too (Together's are optional); they are not checked.
func (s *Server) scanBodyLines(path string, size int64, lim bodyScan) (scanResult, error) {
	sc, err := scanFile(path, size, lim.maxBytes, lim.maxRequests, "too_many_requests",
		func(t []byte, lineNo int, seen map[string]struct{}, sc *scanResult, add func(batchError)) {
			scanBodyLine(t, lineNo, lim, seen, sc, add)
		})
	if sc.model == "" {
		sc.model = lim.jobModel
	}
	return sc, err
}

func scanBodyLine(t []byte, lineNo int, lim bodyScan, seen map[string]struct{}, sc *scanResult, add func(batchError)) {
	var ln struct {
		CustomID *string         `json:"custom_id"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(t, &ln); err != nil {
		add(lineErr("invalid_json_line", fmt.Sprintf("Line %d is not valid JSON: %v", lineNo, err), lineNo, ""))
		return
	}
	model := gjson.GetBytes(ln.Body, "model").String()
	switch {
	case ln.CustomID == nil || *ln.CustomID == "":
		add(lineErr("invalid_request", fmt.Sprintf("Line %d: custom_id is required.", lineNo), lineNo, "custom_id"))
	case lim.maxCustomID > 0 && utf8.RuneCountInString(*ln.CustomID) > lim.maxCustomID:
		add(lineErr("invalid_request", fmt.Sprintf("Line %d: custom_id is longer than %d characters.", lineNo, lim.maxCustomID), lineNo, "custom_id"))
	case len(ln.Body) == 0 || ln.Body[0] != '{' || !json.Valid(ln.Body):
		add(lineErr("invalid_request", fmt.Sprintf("Line %d: body must be a JSON object.", lineNo), lineNo, "body"))
	case model == "" && lim.jobModel == "":
		add(lineErr("invalid_request", fmt.Sprintf("Line %d: body.model is required when the job has no model.", lineNo), lineNo, "body.model"))
	default:
		if _, dup := seen[*ln.CustomID]; dup {
			add(lineErr("duplicate_custom_id", fmt.Sprintf("Line %d: custom_id %q is used more than once.", lineNo, *ln.CustomID), lineNo, "custom_id"))
			return
		}
		seen[*ln.CustomID] = struct{}{}
		if sc.model == "" {
			sc.model = model
			if lim.jobModel != "" {
				sc.model = lim.jobModel
			}
		}
		sc.tokens += approxTokens(len(ln.Body))
	}
}

// addBatch registers a new batch: its hostile fates drawn, saved and
// counted. Caller holds s.mu.
func (s *Server) addBatch(b *batchRec) {
	s.drawBatchFates(b)
	s.batches[b.ID], s.active[b.ID] = b, b
	s.saveBatch(b)
	s.countCreated(b.Family)
	s.saveState()
	s.logf("emulator: %s batch %s created: %d requests, model %q, %d scan errors", b.Family, b.ID, b.N, b.Model, len(b.ScanErrors))
}

// runBodyLine produces the result of line i of a Mistral or Together
// batch. Lines not run (expired, cancelled) are in no result file.
func (s *Server) runBodyLine(b *batchRec, i int, line []byte, done bool, undone string, created int64) lineResult {
	ln := readOAILine(line)
	r := lineResult{customID: ln.CustomID}
	if !done {
		r.kind = unrun(undone)
		return r
	}
	body := []byte(ln.Body)
	if b.Model != "" && !gjson.GetBytes(body, "model").Exists() {
		body, _ = sjson.SetBytes(bytes.Clone(body), "model", b.Model)
	}
	var status int
	var resp []byte
	var code, msg string
	f := s.lineFate(b, i)
	e, isInjected := injectedErr(&bodyLineErrs, f)
	switch {
	case isInjected:
		status, code, msg = e.status, e.code, e.msg
	case f == fateOmit:
		m := s.runOpenAI(normEndpoint(b.Endpoint), body, created)
		r.kind, r.in, r.out = outOmitted, m.in, m.out
		return r
	default:
		m := s.runOpenAI(normEndpoint(b.Endpoint), body, created)
		status, resp, r.in, r.out = m.status, m.body, m.in, m.out
		if status/100 != 2 {
			code = gjson.GetBytes(resp, "error.code").String()
			if code == "" {
				code = gjson.GetBytes(resp, "error.type").String()
			}
			msg = gjson.GetBytes(resp, "error.message").String()
		}
	}
	r.dest, r.kind = destOut, outSucceeded
	if status/100 != 2 {
		r.dest, r.kind = destErr, outErrored
	}
	d := make([]byte, 0, len(resp)+160)
	if b.Family == famTogether {
		d = append(d, `{"custom_id":`...)
		d = append(d, mustJSON(ln.CustomID)...)
		if status/100 != 2 {
			d = append(d, `,"error":`...)
			d = append(d, mustJSON(map[string]any{"message": msg, "code": code})...)
			r.data = append(d, '}')
			return r
		}
		d = append(d, `,"response":{"status_code":200,"body":`...)
		d = append(d, resp...)
		r.data = append(d, "}}"...)
		return r
	}
	// Mistral: the OpenAI batch output line.
	if resp == nil {
		resp = mustJSON(map[string]any{"object": "error", "message": msg, "type": code, "param": nil, "code": nil})
	}
	d = append(d, `{"id":"batch-`...)
	d = append(d, hexID(s.opts.Seed, "mreq", b.ID, i, 12)...)
	d = append(d, `","custom_id":`...)
	d = append(d, mustJSON(ln.CustomID)...)
	d = append(d, `,"response":{"status_code":`...)
	d = strconv.AppendInt(d, int64(status), 10)
	d = append(d, `,"body":`...)
	d = append(d, resp...)
	r.data = append(d, `},"error":null}`...)
	return r
}

// progressOf is the share of b's lines done as of now, in [0, 1].
func (s *Server) progressOf(b *batchRec, now time.Time) float64 {
	switch b.Status {
	case stInProgress:
		return s.fracAt(b, now)
	case stCancelling:
		return b.DoneFraction
	case stCompleted:
		return 1
	case stExpired, stCancelled:
		if b.N == 0 {
			return 0
		}
		c := b.Counts
		return float64(c.Succeeded+c.Errored) / float64(b.N)
	}
	return 0
}

// bodyLineErrs are the line errors the emulator injects into Mistral's and
// Together's results (see injectedErr).
var bodyLineErrs = [3]injected{
	{status: 429, code: "rate_limit_exceeded", msg: "Rate limit reached (injected by the emulator's LineErrorRate)."},
	{status: 500, code: "server_error", msg: "Internal server error (injected by the emulator's LineErrorRate)."},
	{status: 400, code: "invalid_request_error", msg: "Invalid request (permanent error injected by the emulator's LineErrorRate)."},
}
