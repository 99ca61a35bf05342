package emulator

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// Hostile output: the knobs of Options that make result files and batch
// lifecycles wrong in the ways real providers have been seen to be wrong.

// fated reports whether the fate named tag falls on (id, i) at rate.
func (s *Server) fated(tag, id string, i int, rate float64) bool {
	return rate > 0 && unit(h64(s.opts.Seed, tag, id, i)) < rate
}

// drawBatchFates sets the per-batch hostile fates of a new batch. Caller
// holds s.mu.
func (s *Server) drawBatchFates(b *batchRec) {
	if s.fated("stuck", b.ID, 0, s.opts.StuckRate) {
		b.Stuck = s.opts.StuckPhase
		s.bump(func(st *Stats) { st.BatchesStuck++ })
	}
	if b.Family != famCloudflare && s.fated("out404", b.ID, 0, s.opts.OutputFile404Rate) {
		b.OutputLost = true
	}
}

// forgets reports whether a new batch is to be forgotten once create has
// answered.
func (s *Server) forgets(b *batchRec) bool {
	return s.fated("forget", b.ID, 0, s.opts.ForgetBatchRate)
}

// forget drops a batch as if the provider had lost it: lookups 404,
// listings omit it, nothing of it runs. Caller holds s.mu.
func (s *Server) forget(b *batchRec) {
	delete(s.batches, b.ID)
	delete(s.active, b.ID)
	delete(s.permCache, b.ID)
	s.deleteBatchFiles(b.ID)
	s.bump(func(st *Stats) { st.BatchesForgotten++ })
	s.logf("emulator: %s batch %s forgotten after create (ForgetBatchRate)", b.Family, b.ID)
}

// stuckHere reports whether b is in the phase it is stuck in, so no
// lifecycle event applies (not even the 24h expiry) until it is cancelled.
func (s *Server) stuckHere(b *batchRec) bool {
	switch {
	case b.Stuck == "":
		return false
	case b.Family == famOpenAI:
		return b.Status == b.Stuck
	case b.Family == famAnthropic:
		return b.Status == stInProgress // Anthropic has no other phase
	case b.Stuck == stValidating:
		return b.Status == stValidating // Cloudflare "queued"
	}
	return b.Status == stInProgress // Cloudflare "running"
}

// lineFaults are the hostile decorations of one result line.
type lineFaults struct {
	malformed bool
	dup       bool
	ghost     bool
}

func (s *Server) lineFaultsOf(b *batchRec, i int) lineFaults {
	if b.Inline {
		return lineFaults{} // inlined responses are part of the Operation, not a file
	}
	f := lineFaults{malformed: s.fated("malformed", b.ID, i, s.opts.MalformedLineRate)}
	if !f.malformed {
		f.dup = s.fated("dupline", b.ID, i, s.opts.DuplicateLineRate)
	}
	f.ghost = s.fated("ghost", b.ID, i, s.opts.UnknownCustomIDRate)
	return f
}

// editLine decodes one result line as an object, lets fn change it and
// encodes it again.
func editLine(data []byte, fn func(m map[string]json.RawMessage)) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return data
	}
	fn(m)
	return mustJSON(m)
}

// malform turns result line i of b into a line that is no result.
func (s *Server) malform(b *batchRec, i int, data []byte) []byte {
	cut := unit(h64(s.opts.Seed, "malformedkind", b.ID, i)) < 0.5
	switch {
	case cut && b.Family == famCloudflare:
		// One JSON document: a cut item would spoil every item after it.
		return []byte(`"garbled result item (emulator MalformedLineRate)"`)
	case cut:
		return append([]byte(nil), data[:len(data)/2]...)
	}
	return editLine(data, func(m map[string]json.RawMessage) {
		delete(m, "custom_id")
		delete(m, "key") // Gemini
		if b.Family == famCloudflare {
			delete(m, "id")
			delete(m, "external_reference")
		}
	})
}

// ghost is a copy of result line i of b for a custom_id never sent.
func (s *Server) ghost(b *batchRec, i int, data []byte) []byte {
	id := mustJSON("ghost-" + hexID(s.opts.Seed, "ghost", b.ID, i, 12))
	return editLine(data, func(m map[string]json.RawMessage) {
		if b.Family == famCloudflare {
			m["external_reference"] = id
			m["id"] = json.RawMessage(strconv.Itoa(b.N + i)) // no index of the batch
			return
		}
		if b.Family == famGemini || b.Family == famVertex {
			m["key"] = id
			return
		}
		m["custom_id"] = id
	})
}

// conflicting is, for a succeeded result line, a retryable error for the
// same custom_id; the client must prefer the success.
func (s *Server) conflicting(b *batchRec, i int, data []byte) []byte {
	const msg = "The server had an error while processing your request (duplicate line injected by the emulator's DuplicateLineRate)."
	return editLine(data, func(m map[string]json.RawMessage) {
		switch b.Family {
		case famOpenAI:
			m["response"] = mustJSON(map[string]any{"status_code": 500,
				"request_id": "req_dup" + hexID(s.opts.Seed, "dupreq", b.ID, i, 13),
				"body":       json.RawMessage(oaiErrorBody(msg, "server_error", ""))})
			m["error"] = json.RawMessage("null")
		case famMistral:
			m["response"] = mustJSON(map[string]any{"status_code": 500,
				"body": map[string]any{"object": "error", "message": msg, "type": "internal_server_error", "param": nil, "code": nil}})
			m["error"] = json.RawMessage("null")
		case famTogether:
			delete(m, "response")
			m["error"] = mustJSON(map[string]any{"message": msg, "code": "server_error"})
		case famAnthropic:
			m["result"] = mustJSON(map[string]any{"type": "errored", "error": map[string]any{
				"type": "error", "error": map[string]any{"type": "api_error", "message": msg}}})
		case famGemini:
			delete(m, "response")
			m[s.opts.GeminiLineErrorField] = mustJSON(gemStatusLine("INTERNAL", msg))
		case famVertex:
			delete(m, "response")
			m["status"] = mustJSON(vtxStatus(http.StatusInternalServerError, msg))
		default:
			delete(m, "result")
			m["success"] = json.RawMessage("false")
			m["error"] = mustJSON(map[string]any{"code": 3043, "message": msg})
		}
	})
}

// truncates draws whether this download of the result named id is cut
// short. Caller holds s.mu.
func (s *Server) truncates(id string) bool {
	if s.opts.TruncateDownloadRate <= 0 {
		return false
	}
	n := s.downloads[id]
	s.downloads[id] = n + 1
	return s.fated("truncate", id, n, s.opts.TruncateDownloadRate)
}

// serveCut answers 200 with the Content-Length of the whole body (size
// bytes of r) but sends only half of it, then drops the connection: the
// client sees an unexpected EOF.
func (s *Server) serveCut(w http.ResponseWriter, size int64, r io.Reader) {
	s.bump(func(st *Stats) { st.DownloadsTruncated++ })
	s.logf("emulator: cutting a download of %d bytes at %d (TruncateDownloadRate)", size, size/2)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	io.CopyN(w, r, size/2)
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}
