package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-batch/sluice/internal/atomicfile"
)

// Gemini Batch Mode: create (from a file or inlined requests), the Operation, get, cancel, delete, list.

// gemModelCall serves POST /{v}/models/{model}:batchGenerateContent (create
// a batch) and :generateContent (one direct call).
func (s *Server) gemModelCall(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	coll := "models/"
	if strings.Contains(r.URL.Path, "/tunedModels/") {
		coll = "tunedModels/"
	}
	model, method, _ := strings.Cut(name, ":")
	switch method {
	case "batchGenerateContent":
		return s.gemCreateBatch(w, r, coll+model)
	case "generateContent":
		return s.gemGenerate(w, r, coll+model)
	default:
		return errf(http.StatusNotFound, "Method "+method+" of "+coll+model+" is not served by the emulator.")
	}
}

// gemGenerate serves one direct :generateContent call.
func (s *Server) gemGenerate(w http.ResponseWriter, r *http.Request, model string) error {
	body, err := readLimited(r, 32<<20)
	if err != nil {
		return errf(http.StatusRequestEntityTooLarge, err.Error())
	}
	m, status := s.runGemini(model, body)
	s.countSync(famGemini, syncJobKey(famGemini, r.Header.Get(HeaderSyncJob)), r, m.status)
	if s.syncWait(r) != nil {
		return nil
	}
	if m.status != 200 {
		var st struct{ Message string }
		json.Unmarshal(m.body, &st)
		return gemErr(m.status, status, st.Message)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(m.body)
	return nil
}

// gemInlineMaxBytes bounds a create request with inlined requests (the
// docs: inline requests total under 20 MB).
const gemInlineMaxBytes = 20_000_000

type gemInputConfig struct {
	FileName      string          `json:"fileName"`
	FileNameSnake string          `json:"file_name"`
	Requests      json.RawMessage `json:"requests"`
}

// gemCreateReq is the body of :batchGenerateContent (camelCase or
// snake_case fields, as the SDKs send them).
type gemCreateReq struct {
	Batch *struct {
		DisplayName      string          `json:"displayName"`
		DisplayNameSnake string          `json:"display_name"`
		InputConfig      *gemInputConfig `json:"inputConfig"`
		InputConfigSnake *gemInputConfig `json:"input_config"`
	} `json:"batch"`
}

func (s *Server) gemCreateBatch(w http.ResponseWriter, r *http.Request, model string) error {
	body, err := readLimited(r, gemInlineMaxBytes)
	if err != nil {
		return gemTooLarge
	}
	req, err := parse[gemCreateReq](body, geminiFam)
	if err != nil {
		return err
	}
	if req.Batch == nil {
		return errf(http.StatusBadRequest, "* BatchGenerateContentRequest.batch: batch is required\n")
	}
	ic := req.Batch.InputConfig
	if ic == nil {
		ic = req.Batch.InputConfigSnake
	}
	if ic == nil {
		return errf(http.StatusBadRequest, "* GenerateContentBatch.input_config: input_config is required\n")
	}
	fileName := cmp(ic.FileName, ic.FileNameSnake)
	dn := cmp(req.Batch.DisplayName, req.Batch.DisplayNameSnake)
	if (fileName == "") == (len(ic.Requests) == 0) {
		return errf(http.StatusBadRequest, "* GenerateContentBatch.input_config: exactly one of file_name and requests is required\n")
	}
	if fileName == "" {
		return s.gemCreateInline(w, model, dn, ic.Requests)
	}
	sp, err := s.spoolFile(strings.TrimPrefix(fileName, "files/"), func(f *fileRec) error {
		if f == nil || f.Family != famGemini {
			return errf(http.StatusNotFound, "Requested entity was not found: "+fileName+".")
		}
		return s.gemCheckActive()
	}, func(seq int64) string { return gemID(s.opts.Seed, "gembatch", int(seq), 36) })
	if err != nil {
		return err
	}
	id, f, now := sp.id, sp.f, sp.now
	sc, err := s.scanGemini(s.batchInput(id), f.Bytes)
	if err != nil {
		os.Remove(s.batchInput(id))
		return err
	}
	return s.locked(func() error {
		if err := s.gemCheckTokens(model, sc.tokens); err != nil {
			os.Remove(s.batchInput(id))
			return err
		}
		b := &batchRec{ID: id, Family: famGemini, Seq: sp.seq, Created: now, Model: model, InputFileID: "files/" + f.ID,
			DisplayName: dn, JobKey: jobKeyFromFilename(dn), N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
			FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
			ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
			Status:       stValidating}
		s.register(w, b, http.StatusOK, func() any { return s.gemBatchJSON(b, now) })
		return nil
	})
}

// gemTooLarge refuses a create request over gemInlineMaxBytes.
var gemTooLarge = errf(http.StatusBadRequest, fmt.Sprintf("The request is larger than the %s bytes inlined batches may carry; upload the requests as a file.", commas(gemInlineMaxBytes)))

// gemCheckActive refuses a batch over GeminiMaxActiveBatches. Caller holds
// s.mu.
func (s *Server) gemCheckActive() error {
	if lim := s.opts.GeminiMaxActiveBatches; lim > 0 && s.activeOf(famGemini) >= lim {
		return errf(http.StatusTooManyRequests, "You have reached the limit of %d concurrent batch jobs. Wait for some to finish.", lim)
	}
	return nil
}

// gemCheckTokens refuses a batch that would pass EnqueuedTokenLimit for
// model. Caller holds s.mu.
func (s *Server) gemCheckTokens(model string, tokens int64) error {
	if lim := s.opts.EnqueuedTokenLimit; lim > 0 && s.enqueued(famGemini, model, "")+tokens > lim {
		return errf(http.StatusTooManyRequests,
			"Enqueued tokens for %s would exceed the limit of %s. Try again once some batches have ended.", model, commas(lim))
	}
	return nil
}

// gemCreateInline creates a batch from inputConfig.requests
// ({"requests":[{"request":…,"metadata":{"key":…}}]}): the requests are
// spooled as {"key","request","metadata"} lines, and their responses come
// back in the Operation, in request order, as
// output.inlinedResponses.inlinedResponses [{"response"|"error","metadata"}].
func (s *Server) gemCreateInline(w http.ResponseWriter, model, displayName string, raw json.RawMessage) error {
	var in struct {
		Requests []struct {
			Request  json.RawMessage   `json:"request"`
			Metadata map[string]string `json:"metadata"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || len(in.Requests) == 0 {
		return errf(http.StatusBadRequest, "* GenerateContentBatch.input_config.requests.requests: at least one request is required\n")
	}
	var buf bytes.Buffer
	var tokens int64
	for i, it := range in.Requests {
		if len(it.Request) == 0 || it.Request[0] != '{' {
			return errf(http.StatusBadRequest, "* GenerateContentBatch.input_config.requests.requests[%d].request: request is required\n", i)
		}
		buf.Write(mustJSON(map[string]any{"key": it.Metadata["key"], "request": it.Request, "metadata": it.Metadata}))
		buf.WriteByte('\n')
		tokens += approxTokens(len(it.Request))
	}
	return s.ticked(func(now time.Time) error {
		if err := s.gemCheckActive(); err != nil {
			return err
		}
		if err := s.gemCheckTokens(model, tokens); err != nil {
			return err
		}
		seq := s.nextSeq()
		id := gemID(s.opts.Seed, "gembatch", int(seq), 36)
		if err := atomicfile.WriteFile(s.batchInput(id), buf.Bytes()); err != nil {
			return err
		}
		b := &batchRec{ID: id, Family: famGemini, Seq: seq, Created: now, Model: model, Inline: true,
			DisplayName: displayName, JobKey: jobKeyFromFilename(displayName), N: len(in.Requests), Tokens: tokens,
			FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
			ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
			Status:       stValidating}
		s.register(w, b, http.StatusOK, func() any { return s.gemBatchJSON(b, now) })
		return nil
	})
}

// gemInlined reads the inlined responses of an ended inline batch.
func (s *Server) gemInlined(b *batchRec) []json.RawMessage {
	data, err := os.ReadFile(s.batchResults(b.ID))
	if err != nil {
		return nil
	}
	var out []json.RawMessage
	for _, l := range bytes.Split(data, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, json.RawMessage(l))
		}
	}
	return out
}

// activeOf counts a family's batches that have not ended. Caller holds s.mu.
func (s *Server) activeOf(family string) int {
	n := 0
	for _, b := range s.active {
		if b.Family == family {
			n++
		}
	}
	return n
}

// scanGemini checks a batch input file ({"key","request"} lines) and counts
// its requests and estimated tokens. A line that is not such an object
// fails the batch when it leaves PENDING.
func (s *Server) scanGemini(path string, size int64) (scanResult, error) {
	var sc scanResult
	if size > s.opts.GeminiMaxFileBytes {
		sc.errs = []batchError{{Code: "INVALID_ARGUMENT", Message: fmt.Sprintf(
			"The batch input file is %s bytes; the maximum is %s bytes.", commas(size), commas(s.opts.GeminiMaxFileBytes))}}
		return sc, nil
	}
	return scanRequests(path, true, "", "the batch input file is empty")
}

// scanRequests checks an input file of {"request": GenerateContentRequest}
// lines (each with a "key" when needKey) and counts its requests and
// estimated tokens; every message starts with prefix, and empty is that
// of a file without a line. Gemini's batches and Vertex AI's jobs read
// their input with it.
func scanRequests(path string, needKey bool, prefix, empty string) (scanResult, error) {
	var sc scanResult
	in, err := os.Open(path)
	if err != nil {
		return sc, err
	}
	defer in.Close()
	if err := eachLine(in, func(t []byte, lineNo int) bool {
		sc.n++
		var ln struct {
			Key     *string         `json:"key"`
			Request json.RawMessage `json:"request"`
		}
		switch err := json.Unmarshal(t, &ln); {
		case err != nil:
			sc.add(fmt.Sprintf("%sline %d is not valid JSON: %v", prefix, lineNo, err))
		case needKey && ln.Key == nil:
			sc.add(fmt.Sprintf("%sline %d has no \"key\"", prefix, lineNo))
		case len(ln.Request) == 0 || ln.Request[0] != '{':
			sc.add(fmt.Sprintf("%sline %d: \"request\" must be a GenerateContentRequest object", prefix, lineNo))
		default:
			sc.tokens += approxTokens(len(ln.Request))
		}
		return true
	}); err != nil {
		return sc, err
	}
	if sc.n == 0 {
		sc.add(empty)
	}
	return sc, nil
}

func (sc *scanResult) add(msg string) {
	if len(sc.errs) < maxReportedErrors {
		sc.errs = append(sc.errs, batchError{Code: "INVALID_ARGUMENT", Message: msg})
	}
}

// gemState is the wire state of a batch. Cancel ends a Gemini batch at
// once, so cancelling is never shown.
func gemState(b *batchRec) string {
	switch b.Status {
	case stValidating:
		return "BATCH_STATE_PENDING"
	case stInProgress, stFinalizing, stCancelling:
		return "BATCH_STATE_RUNNING"
	case stCompleted:
		return "BATCH_STATE_SUCCEEDED"
	case stFailed:
		return "BATCH_STATE_FAILED"
	case stExpired:
		return "BATCH_STATE_EXPIRED"
	case stCancelled:
		return "BATCH_STATE_CANCELLED"
	}
	return "BATCH_STATE_UNSPECIFIED"
}

const (
	gemBatchType  = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
	gemOutputType = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
)

// gemBatchJSON renders a batch as the Operation the API answers: the
// GenerateContentBatch in metadata (what the SDKs read), plus done,
// response and error at the top (what the docs' curl reads).
func (s *Server) gemBatchJSON(b *batchRec, now time.Time) map[string]any {
	stats := map[string]any{}
	put := func(k string, n int) {
		if n > 0 {
			stats[k] = strconv.Itoa(n)
		}
	}
	put("requestCount", b.N)
	updated := b.Created
	switch b.Status {
	case stValidating:
		put("pendingRequestCount", b.N)
	case stInProgress, stFinalizing, stCancelling:
		ok, failed := s.liveCounts(b, now)
		put("successfulRequestCount", ok)
		put("failedRequestCount", failed)
		put("pendingRequestCount", b.N-ok-failed)
		if b.InProgressAt != nil {
			updated = *b.InProgressAt
		}
	default:
		if b.Status != stFailed {
			put("successfulRequestCount", b.Counts.Succeeded)
			put("failedRequestCount", b.Counts.Errored+b.Counts.Expired+b.Counts.Cancelled)
		}
		if t := b.endedAt(); t != nil {
			updated = *t
		}
	}
	md := map[string]any{"@type": gemBatchType, "model": b.Model, "name": "batches/" + b.ID,
		"createTime": gemTime(b.Created), "updateTime": gemTime(updated), "batchStats": stats, "state": gemState(b)}
	if !b.Inline {
		md["inputConfig"] = map[string]any{"fileName": b.InputFileID} // omitted for inlined requests (obs)
	}
	if b.DisplayName != "" {
		md["displayName"] = b.DisplayName
	}
	op := map[string]any{"name": "batches/" + b.ID, "metadata": md}
	if !terminal(b.Status) {
		return op
	}
	md["endTime"] = gemTime(updated)
	op["done"] = true
	if b.OutputFileID != "" {
		md["output"] = map[string]any{"responsesFile": "files/" + b.OutputFileID}
		op["response"] = map[string]any{"@type": gemOutputType, "responsesFile": "files/" + b.OutputFileID}
	}
	if b.Inline && b.Status != stFailed {
		inl := map[string]any{"inlinedResponses": s.gemInlined(b)}
		md["output"] = map[string]any{"inlinedResponses": inl}
		op["response"] = map[string]any{"@type": gemOutputType, "inlinedResponses": inl}
	}
	if b.Status == stFailed && len(b.Errors) > 0 {
		op["error"] = gemStatusOf(b.Errors)
	}
	return op
}

// gemStatusOf is the google.rpc.Status of a failed batch (or job) with
// errs: the first error's gRPC code (INTERNAL when it has none) and every
// message, joined.
func gemStatusOf(errs []batchError) map[string]any {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Message
	}
	code := gemGRPCCode[errs[0].Code]
	if code == 0 {
		code = gemGRPCCode["INTERNAL"]
	}
	return map[string]any{"code": code, "message": strings.Join(msgs, "; ")}
}

// gemBatchAction serves POST /batches/{id}:cancel. Cancel ends the batch
// at once: requests already run keep their responses, the rest never run.
func (s *Server) gemBatchAction(w http.ResponseWriter, r *http.Request) error {
	id, action, _ := strings.Cut(r.PathValue("name"), ":")
	if action != "cancel" {
		return errf(http.StatusNotFound, "Unknown batch method "+action+".")
	}
	return s.withBatch(geminiFam, id, func(b *batchRec, now time.Time) error {
		if !s.cancel(b, now) {
			return gemErr(http.StatusBadRequest, "FAILED_PRECONDITION", "Batch batches/"+id+" has already ended ("+gemState(b)+") and cannot be cancelled.")
		}
		s.apply(b, evCancelled, now)
		writeJSON(w, http.StatusOK, map[string]any{})
		return nil
	})
}

func (s *Server) gemDeleteBatch(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(geminiFam, r.PathValue("name"), func(b *batchRec, _ time.Time) error {
		if !terminal(b.Status) {
			return gemErr(http.StatusBadRequest, "FAILED_PRECONDITION", "Batch batches/"+b.ID+" has not ended; cancel it first.")
		}
		s.deleteBatch(b)
		writeJSON(w, http.StatusOK, map[string]any{})
		return nil
	})
}

func (s *Server) gemListBatches(w http.ResponseWriter, r *http.Request) error {
	size, token, err := gemPage(r, 50, 1000)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("filter") != "" {
		return errf(http.StatusBadRequest, "filter is not supported for batches of the Gemini Developer API.")
	}
	return s.ticked(func(now time.Time) error {
		writeJSON(w, http.StatusOK, gemList(s.sortedBatches(famGemini), token, size, "operations",
			func(b *batchRec) string { return b.ID }, func(b *batchRec) any { return s.gemBatchJSON(b, now) }))
		return nil
	})
}

// commitGeminiOutput makes the responses file of a Gemini batch: a
// GENERATED file named files/batch-<id>, or none when no line was written.
func (s *Server) commitGeminiOutput(b *batchRec, rf *resultFile, t time.Time) error {
	if rf.err != nil {
		return rf.err
	}
	if rf.lines == 0 {
		rf.discard()
		return nil
	}
	id := "batch-" + b.ID
	exp := t.Add(geminiExpiry).Unix()
	f := &fileRec{ID: id, Seq: s.nextSeq(), Bytes: rf.bytes, Lines: rf.lines, CreatedAt: t.Unix(), ExpiresAt: &exp,
		Purpose: "gemini", Family: famGemini, MimeType: "application/jsonl", Source: "GENERATED", Created: t,
		Lost: b.OutputLost}
	if err := rf.commit(s.filePath(id)); err != nil {
		return err
	}
	if sum, err := fileSHA256(s.filePath(id)); err == nil {
		f.SHA256 = sum
	}
	s.files[id] = f
	s.saveFile(f)
	b.OutputFileID = id
	return nil
}
