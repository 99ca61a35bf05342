package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"
	"unicode/utf8"
)

var batchEndpoints = []string{"/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
	"/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos"}

// maxReportedErrors caps errors.data of a failed validation.
const maxReportedErrors = 100

func (s *Server) openaiRoutes(mux *http.ServeMux) {
	h := openaiFam.h
	for _, p := range []string{"/v1", "/openai/v1"} {
		mux.HandleFunc("POST "+p+"/files", h(s.oaiUploadFile))
		mux.HandleFunc("GET "+p+"/files", h(s.oaiListFiles))
		s.fileRoutes(mux, p, s.oaiFiles())
		mux.HandleFunc("POST "+p+"/batches", h(s.oaiCreateBatch))
		mux.HandleFunc("GET "+p+"/batches", h(s.oaiListBatches))
		mux.HandleFunc("GET "+p+"/batches/{id}", s.getBatch(openaiFam, "id", func(b *batchRec, _ *http.Request, now time.Time) any {
			return s.oaiBatchJSON(b, now)
		}))
		mux.HandleFunc("POST "+p+"/batches/{id}/cancel", h(s.oaiCancelBatch))
		for _, ep := range []string{"/chat/completions", "/completions", "/embeddings", "/responses", "/moderations"} {
			mux.HandleFunc("POST "+p+ep, s.oaiSync("/v1"+ep))
		}
	}
}

// oaiCreateReq is the body of POST /batches.
type oaiCreateReq struct {
	InputFileID        string            `json:"input_file_id"`
	Endpoint           string            `json:"endpoint"`
	CompletionWindow   string            `json:"completion_window"`
	Metadata           map[string]string `json:"metadata"`
	OutputExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Seconds int64  `json:"seconds"`
	} `json:"output_expires_after"`
}

// oaiBad is OpenAI's 400 invalid_request_error with a param and a code.
func oaiBad(msg, param, code string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Msg: msg, Param: param, Code: code}
}

// check validates a create request the way the Batch API does.
func (req *oaiCreateReq) check() error {
	switch {
	case req.InputFileID == "":
		return oaiBad("Missing required parameter: 'input_file_id'.", "input_file_id", "missing_required_parameter")
	case req.Endpoint == "":
		return oaiBad("Missing required parameter: 'endpoint'.", "endpoint", "missing_required_parameter")
	case !slices.Contains(batchEndpoints, normEndpoint(req.Endpoint)):
		return oaiBad(fmt.Sprintf("Invalid value: '%s'. Supported values are: %q.", req.Endpoint, batchEndpoints), "endpoint", "invalid_value")
	case req.CompletionWindow == "":
		return oaiBad("Missing required parameter: 'completion_window'.", "completion_window", "missing_required_parameter")
	case req.CompletionWindow != "24h":
		return oaiBad("Invalid value: '"+req.CompletionWindow+"'. Supported values are: '24h'.", "completion_window", "invalid_value")
	case len(req.Metadata) > 16:
		return oaiBad(fmt.Sprintf("Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with %d properties instead.", len(req.Metadata)), "metadata", "object_above_max_properties")
	case req.OutputExpiresAfter != nil && (req.OutputExpiresAfter.Anchor != "created_at" ||
		req.OutputExpiresAfter.Seconds < 3600 || req.OutputExpiresAfter.Seconds > 2592000):
		return oaiBad("Invalid 'output_expires_after': anchor must be 'created_at' and seconds between 3600 and 2592000.", "output_expires_after", "invalid_value")
	}
	for k, v := range req.Metadata {
		if utf8.RuneCountInString(k) > 64 || utf8.RuneCountInString(v) > 512 {
			return oaiBad("Invalid 'metadata': keys are at most 64 characters and values at most 512 characters.", "metadata", "invalid_value")
		}
	}
	return nil
}

// spooled is a new batch's input, snapshotted into its spool under s.mu:
// its id, sequence number, creation time and input file.
type spooled struct {
	id  string
	seq int64
	now time.Time
	f   *fileRec
}

// spoolFile snapshots input file fileID into the spool of a new batch
// (id made by newID from its sequence number): lookup checks the file (nil:
// unknown) and answers the refusal.
func (s *Server) spoolFile(fileID string, lookup func(f *fileRec) error, newID func(seq int64) string) (spooled, error) {
	var sp spooled
	err := s.ticked(func(now time.Time) error {
		f := s.files[fileID]
		if err := lookup(f); err != nil {
			return err
		}
		sp = spooled{seq: s.nextSeq(), now: now, f: f}
		sp.id = newID(sp.seq)
		return linkOrCopy(s.filePath(f.ID), s.batchInput(sp.id))
	})
	return sp, err
}

// register registers a new batch and answers it (render, status), then
// forgets it when it is fated to be forgotten. Caller holds s.mu.
func (s *Server) register(w http.ResponseWriter, b *batchRec, status int, render func() any) {
	s.addBatch(b)
	answer := render()
	if s.forgets(b) {
		s.forget(b)
	}
	writeJSON(w, status, answer)
}

func (s *Server) oaiCreateBatch(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeChecked[oaiCreateReq](r, 1<<20, openaiFam)
	if err != nil {
		return err
	}
	// Snapshot the input file into the batch's spool, then scan it unlocked.
	sp, err := s.spoolFile(req.InputFileID, func(f *fileRec) error {
		switch {
		case f == nil || f.Family != "":
			return &apiError{Status: http.StatusNotFound, Msg: "No such File object: " + req.InputFileID, Param: "input_file_id"}
		case f.Purpose != "batch":
			return oaiBad("The input file must have purpose 'batch', not '"+f.Purpose+"'.", "input_file_id", "invalid_value")
		}
		return nil
	}, func(seq int64) string { return "batch_" + hexID(s.opts.Seed, "batch", "", int(seq), 16) })
	if err != nil {
		return err
	}
	id, f, now := sp.id, sp.f, sp.now
	sc, err := s.scanOpenAI(s.batchInput(id), req.Endpoint, f.Bytes)
	if err != nil {
		os.Remove(s.batchInput(id))
		return err
	}

	b := &batchRec{ID: id, Family: famOpenAI, Seq: sp.seq, Created: now, Endpoint: req.Endpoint, Model: sc.model,
		InputFileID: f.ID, CompletionWindow: req.CompletionWindow, Metadata: req.Metadata,
		JobKey: jobKeyOpenAI(req.Metadata, f.Filename), N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
		FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
		ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
		Status:       stValidating}
	if req.OutputExpiresAfter != nil {
		b.OutputExpiresSec = req.OutputExpiresAfter.Seconds
	}
	return s.locked(func() error {
		s.register(w, b, http.StatusOK, func() any {
			s.bump(func(st *Stats) { st.noteOutputExpiry(b.OutputExpiresSec) })
			return s.oaiBatchJSON(b, now)
		})
		return nil
	})
}

type scanResult struct {
	n      int
	tokens int64
	model  string
	errs   []batchError
}

func lineErr(code, msg string, line int, param string) batchError {
	e := batchError{Code: code, Message: msg}
	if line > 0 {
		e.Line = &line
	}
	if param != "" {
		e.Param = &param
	}
	return e
}

// scanOpenAI validates a batch input file the way the Batch API does and
// collects its request count, model and estimated input tokens
// (ceil(len(body)/4) per line).
func (s *Server) scanOpenAI(path, endpoint string, size int64) (scanResult, error) {
	ep := normEndpoint(endpoint)
	return scanFile(path, size, s.opts.MaxBatchBytes, s.opts.MaxRequestsPerBatch, "too_many_tasks",
		func(t []byte, lineNo int, seen map[string]struct{}, sc *scanResult, add func(batchError)) {
			s.scanLine(t, lineNo, ep, seen, sc, add)
		})
}

// scanFile reads a batch input file line by line, counting its requests
// and handing each of the first maxRequests lines to scanLine; it reports a
// file over maxBytes, an empty file and a file over maxRequests
// (tooManyCode) as batch errors, in OpenAI's words.
func scanFile(path string, size, maxBytes int64, maxRequests int, tooManyCode string,
	scanLine func(t []byte, lineNo int, seen map[string]struct{}, sc *scanResult, add func(batchError))) (scanResult, error) {
	var sc scanResult
	if size > maxBytes {
		sc.errs = []batchError{lineErr("file_too_large", fmt.Sprintf(
			"The batch input file is %s bytes; the maximum is %s bytes.", commas(size), commas(maxBytes)), 0, "input_file_id")}
		return sc, nil
	}
	in, err := os.Open(path)
	if err != nil {
		return sc, err
	}
	defer in.Close()
	seen := map[string]struct{}{}
	add := func(e batchError) {
		if len(sc.errs) < maxReportedErrors {
			sc.errs = append(sc.errs, e)
		}
	}
	if err := eachLine(in, func(t []byte, lineNo int) bool {
		sc.n++
		if sc.n <= maxRequests {
			scanLine(t, lineNo, seen, &sc, add)
		}
		return true
	}); err != nil {
		return sc, err
	}
	switch {
	case sc.n == 0:
		sc.errs = []batchError{lineErr("empty_file", "The batch input file is empty.", 0, "input_file_id")}
	case sc.n > maxRequests:
		sc.errs = append([]batchError{lineErr(tooManyCode, fmt.Sprintf(
			"The batch input file contains %d requests; the maximum is %d.", sc.n, maxRequests), 0, "")}, sc.errs...)
	}
	return sc, nil
}

func (s *Server) scanLine(t []byte, lineNo int, ep string, seen map[string]struct{}, sc *scanResult, add func(batchError)) {
	var ln struct {
		CustomID *string         `json:"custom_id"`
		Method   string          `json:"method"`
		URL      string          `json:"url"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(t, &ln); err != nil {
		add(lineErr("invalid_json_line", fmt.Sprintf("This line is not parseable as valid JSON: %v", err), lineNo, ""))
		return
	}
	var body struct {
		Model string `json:"model"`
	}
	bodyErr := json.Unmarshal(ln.Body, &body)
	switch {
	case ln.CustomID == nil || *ln.CustomID == "":
		add(lineErr("invalid_request", "Missing required parameter: 'custom_id'.", lineNo, "custom_id"))
	case ln.Method != "POST":
		add(lineErr("invalid_request", fmt.Sprintf("Invalid method %q: only POST is supported.", ln.Method), lineNo, "method"))
	case normEndpoint(ln.URL) != ep:
		add(lineErr("url_mismatch", fmt.Sprintf("The url %q does not match the batch endpoint %q.", ln.URL, ep), lineNo, "url"))
	case len(ln.Body) == 0 || bodyErr != nil || ln.Body[0] != '{':
		add(lineErr("invalid_request", "The 'body' of the request must be a JSON object.", lineNo, "body"))
	case body.Model == "" && ep != "/v1/moderations":
		add(lineErr("invalid_request", "Missing required parameter: 'body.model'.", lineNo, "body.model"))
	default:
		if _, dup := seen[*ln.CustomID]; dup {
			add(lineErr("duplicate_custom_id", fmt.Sprintf("The custom_id %q is used more than once in this batch.", *ln.CustomID), lineNo, "custom_id"))
			return
		}
		seen[*ln.CustomID] = struct{}{}
		if sc.model == "" {
			sc.model = body.Model
		} else if body.Model != sc.model {
			add(lineErr("model_mismatch", fmt.Sprintf("The model %q does not match the batch model %q: every line must use the same model.", body.Model, sc.model), lineNo, "body.model"))
			return
		}
		sc.tokens += approxTokens(len(ln.Body))
	}
}

// oaiBatchJSON renders the Batch object as of now.
func (s *Server) oaiBatchJSON(b *batchRec, now time.Time) map[string]any {
	ts := func(t *time.Time) any { return optTime(t, func(t time.Time) any { return t.Unix() }) }
	var total, completed, failed int
	switch b.Status {
	case stInProgress, stFinalizing, stCancelling:
		total = b.N
		completed, failed = s.liveCounts(b, now)
	case stCompleted, stExpired, stCancelled:
		if b.InProgressAt == nil {
			break // cancelled while validating
		}
		total = b.N
		completed, failed = b.Counts.Succeeded, b.Counts.Errored+b.Counts.Expired+b.Counts.Cancelled
	}
	var errs any
	if len(b.Errors) > 0 {
		errs = map[string]any{"object": "list", "data": b.Errors}
	}
	var md any
	if b.Metadata != nil {
		md = b.Metadata
	}
	return map[string]any{
		"id": b.ID, "object": "batch", "endpoint": b.Endpoint, "model": nullable(b.Model), "errors": errs,
		"input_file_id": b.InputFileID, "completion_window": b.CompletionWindow, "status": b.Status,
		"output_file_id": nullable(b.OutputFileID), "error_file_id": nullable(b.ErrorFileID),
		"created_at": b.Created.Unix(), "in_progress_at": ts(b.InProgressAt),
		"expires_at": b.Created.Add(completionWindow).Unix(), "finalizing_at": ts(b.FinalizingAt),
		"completed_at": ts(b.CompletedAt), "failed_at": ts(b.FailedAt), "expired_at": ts(b.ExpiredAt),
		"cancelling_at": ts(b.CancellingAt), "cancelled_at": ts(b.CancelledAt),
		"request_counts": map[string]any{"total": total, "completed": completed, "failed": failed},
		"usage": map[string]any{"input_tokens": b.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": b.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": b.InputTokens + b.OutputTokens},
		"metadata": md,
	}
}

func (s *Server) oaiCancelBatch(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(openaiFam, r.PathValue("id"), func(b *batchRec, now time.Time) error {
		if !s.cancel(b, now) {
			return errf(http.StatusBadRequest, "Cannot cancel a batch with status '%s'.", b.Status)
		}
		writeJSON(w, http.StatusOK, s.oaiBatchJSON(b, now))
		return nil
	})
}

func (s *Server) oaiListBatches(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := oaiLimit(q, 20, 100)
	if err != nil {
		return err
	}
	return s.ticked(func(now time.Time) error {
		all := s.sortedBatches(famOpenAI)
		page, more := paginateAfter(all, q.Get("after"), limit, func(b *batchRec) string { return b.ID })
		data := make([]any, len(page))
		for i, b := range page {
			data[i] = s.oaiBatchJSON(b, now)
		}
		writeJSON(w, http.StatusOK, listJSON(data, page, more, func(b *batchRec) string { return b.ID }))
		return nil
	})
}

// sortedBatches lists a family's batches newest first.
func (s *Server) sortedBatches(family string) []*batchRec {
	var all []*batchRec
	for _, b := range s.batches {
		if b.Family == family {
			all = append(all, b)
		}
	}
	slices.SortFunc(all, func(a, b *batchRec) int { return int(b.Seq - a.Seq) })
	return all
}
