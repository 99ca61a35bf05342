package emulator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// xAI's batch API at /xai/v1 (base URL http://HOST:PORT/xai/v1, as
// XAI_BASE_URL takes it). Wire facts and the choices taken where they are
// unconfirmed: docs/providers/xai.md.
//
// A batch is made empty under a name; each add-requests call (and the
// input file of create's input_file_id) becomes a segment: a batchRec of
// family xai, with the lifecycle, faults and results of every other
// family, so requests run as they are added, as xAI runs them. The batch
// adds its segments up: done when none is pending.

const (
	famXAI    = "xai"
	xaiPrefix = "/xai/v1"
	// xaiAddBytes bounds an add-requests body (the docs' 25 MB).
	xaiAddBytes = 25_000_000
	// xaiCreateEvery is the least time between two creates of a team.
	xaiCreateEvery = time.Second
	// xaiAddCalls add-requests calls are allowed per xaiAddWindow.
	xaiAddCalls  = 100
	xaiAddWindow = 30 * time.Second
	// xaiPage is the default limit of listings and result pages; at most
	// xaiMaxPage.
	xaiPage, xaiMaxPage = 100, 1000
)

// xaiBatch is an xAI batch: its name and its segments (batchRec ids).
type xaiBatch struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Seq         int64      `json:"seq"`
	Created     time.Time  `json:"created"`
	InputFileID string     `json:"input_file_id,omitempty"`
	CancelTime  *time.Time `json:"cancel_time,omitempty"`
	Segments    []string   `json:"segments"`
	RequestIDs  []string   `json:"request_ids"`
	ids         map[string]bool
}

// xaiState is the family's part of the Server (guarded by s.mu).
type xaiState struct {
	batches    map[string]*xaiBatch
	lastCreate time.Time
	adds       []time.Time // add-requests calls of the last xaiAddWindow
}

// xaiError writes the family's error, {"code": "...", "error": "..."}:
// every error of the family goes through it.
func xaiError(w http.ResponseWriter, status int, msg string) {
	code := map[int]string{400: "Client specified an invalid argument", 401: "Request is missing valid authentication credentials",
		403: "The caller does not have permission", 404: "Some requested entity was not found",
		413: "Request entity too large", 429: "Resource exhausted"}[status]
	if code == "" {
		code = "Internal error"
	}
	writeJSON(w, status, map[string]any{"code": code, "error": msg})
}

func (s *Server) xaiRoutes(mux *http.ServeMux) {
	p := xaiPrefix
	mux.HandleFunc("POST "+p+"/chat/completions", s.syncOpenAIShape(famXAI, "/v1/chat/completions"))
	mux.HandleFunc("POST "+p+"/files", s.xaiUpload)
	mux.HandleFunc("GET "+p+"/files", s.xaiListFiles)
	s.fileRoutes(mux, p, fileAPI{fam: famXAI, render: func(f *fileRec) any { return xaiFileJSON(f) },
		missing: func(w http.ResponseWriter, id string) { xaiError(w, http.StatusNotFound, "File "+id+" not found") },
		deleted: func(f *fileRec) any { return map[string]any{"id": f.ID, "deleted": true} }})
	mux.HandleFunc("POST "+p+"/batches", s.xaiCreate)
	mux.HandleFunc("GET "+p+"/batches", s.xaiList)
	mux.HandleFunc("GET "+p+"/batches/{id}", s.xaiBatchCall(func(w http.ResponseWriter, r *http.Request, b *xaiBatch, now time.Time) {
		writeJSON(w, http.StatusOK, s.xaiJSON(b))
	}))
	mux.HandleFunc("POST "+p+"/batches/{id}", s.xaiCancelColon) // {id}:cancel
	mux.HandleFunc("POST "+p+"/batches/{id}/cancel", s.xaiBatchCall(s.xaiCancel))
	mux.HandleFunc("POST "+p+"/batches/{id}/requests", s.xaiAdd)
	mux.HandleFunc("GET "+p+"/batches/{id}/requests", s.xaiBatchCall(s.xaiRequests))
	mux.HandleFunc("GET "+p+"/batches/{id}/results", s.xaiBatchCall(s.xaiResults))
}

// xaiBatchCall serves a call on one batch: s.mu held (released by defer),
// the clock ticked, the batch looked up (404 when unknown).
func (s *Server) xaiBatchCall(fn func(w http.ResponseWriter, r *http.Request, b *xaiBatch, now time.Time)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		now := s.now()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.tick(now)
		b := s.xai.batches[id]
		if b == nil {
			xaiError(w, http.StatusNotFound, "Batch "+id+" not found")
			return
		}
		fn(w, r, b, now)
	}
}

// xaiCancelColon serves POST /batches/{id}:cancel, the proto's custom
// method (the mux takes the whole last segment as {id}).
func (s *Server) xaiCancelColon(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutSuffix(r.PathValue("id"), ":cancel")
	if !ok {
		xaiError(w, http.StatusNotFound, "Unknown request URL: "+r.Method+" "+r.URL.Path)
		return
	}
	r.SetPathValue("id", id)
	s.xaiBatchCall(s.xaiCancel)(w, r)
}

func xaiFileJSON(f *fileRec) map[string]any {
	return map[string]any{"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.CreatedAt,
		"filename": f.Filename, "purpose": f.Purpose}
}

func (s *Server) xaiUpload(w http.ResponseWriter, r *http.Request) {
	u, uerr := s.readUpload(r, s.opts.MaxFileBytes)
	if uerr != nil {
		xaiError(w, uerr.Status, uerr.Msg)
		return
	}
	defer u.discard()
	if u.tmp == nil {
		xaiError(w, http.StatusBadRequest, "file: field required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.nextSeq()
	f := &fileRec{ID: "file_" + uuidFrom(s.opts.Seed, "xfile", "", int(seq)), Seq: seq, CreatedAt: s.now().Unix(),
		Filename: u.filename, Purpose: u.fields["purpose"], Family: famXAI}
	if err := s.storeUpload(u, f); err != nil {
		xaiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, xaiFileJSON(f))
}

func (s *Server) xaiListFiles(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*fileRec
	for _, f := range s.files {
		if f.Family == famXAI && !f.Result {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *fileRec) int { return int(b.Seq - a.Seq) })
	data := []any{}
	for _, f := range all {
		data = append(data, xaiFileJSON(f))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
}

// xaiCreate serves POST /batches {"name", "input_file_id"?}: at most one
// a second (429 else).
func (s *Server) xaiCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name        string `json:"name"`
		InputFileID string `json:"input_file_id"`
	}
	if !xaiDecode(w, r, 1<<20, &req) {
		return
	}
	if strings.TrimSpace(req.Name) == "" {
		xaiError(w, http.StatusBadRequest, "name: a batch needs a name")
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	if !s.xai.lastCreate.IsZero() && now.Sub(s.xai.lastCreate) < xaiCreateEvery {
		w.Header().Set("Retry-After", "1")
		xaiError(w, http.StatusTooManyRequests, "Batch creation is limited to one batch per second per team")
		return
	}
	var file *fileRec
	if req.InputFileID != "" {
		if file = s.files[req.InputFileID]; file == nil || file.Family != famXAI {
			xaiError(w, http.StatusNotFound, "File "+req.InputFileID+" not found")
			return
		}
	}
	s.xai.lastCreate = now
	seq := s.nextSeq()
	b := &xaiBatch{ID: "batch_" + uuidFrom(s.opts.Seed, "xbatch", "", int(seq)), Name: req.Name, Seq: seq, Created: now,
		InputFileID: req.InputFileID, Segments: []string{}, RequestIDs: []string{}, ids: map[string]bool{}}
	if file != nil {
		if status, err := s.xaiSegment(b, now, func(dst string) error { return linkOrCopy(s.filePath(file.ID), dst) }); err != nil {
			xaiError(w, status, err.Error())
			return
		}
	}
	s.xai.batches[b.ID] = b
	s.xaiSave(b)
	s.countCreated(famXAI)
	s.saveState()
	s.logf("emulator: xai batch %s created: %q", b.ID, b.Name)
	writeJSON(w, http.StatusOK, s.xaiJSON(b))
}

// xaiDecode reads a JSON body of at most limit bytes into v (400 or 413
// when it cannot).
func xaiDecode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body, err := readLimited(r, limit)
	if err != nil {
		xaiError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is over %d bytes", limit))
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		xaiError(w, http.StatusBadRequest, "Invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// xaiAdd serves POST /batches/{id}/requests {"batch_requests":[...]}:
// each a new batch_request_id with a chat_get_completion; at most 25 MB,
// at most 100 calls in 30 s.
func (s *Server) xaiAdd(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Requests []json.RawMessage `json:"batch_requests"`
	}
	if !xaiDecode(w, r, xaiAddBytes, &req) {
		return
	}
	s.xaiBatchCall(func(w http.ResponseWriter, r *http.Request, b *xaiBatch, now time.Time) {
		if !s.xaiAddAllowed(now) {
			w.Header().Set("Retry-After", "1")
			xaiError(w, http.StatusTooManyRequests, fmt.Sprintf("At most %d add-requests calls per %s per team", xaiAddCalls, xaiAddWindow))
			return
		}
		if b.CancelTime != nil {
			xaiError(w, http.StatusBadRequest, "Batch "+b.ID+" was cancelled: no requests can be added")
			return
		}
		ids, msg := b.check(req.Requests)
		if msg != "" {
			xaiError(w, http.StatusBadRequest, msg)
			return
		}
		status, err := s.xaiSegment(b, now, func(dst string) error {
			var buf bytes.Buffer
			for _, it := range req.Requests {
				buf.Write(compactJSON(it))
				buf.WriteByte('\n')
			}
			return os.WriteFile(dst, buf.Bytes(), 0o644)
		})
		if err != nil {
			xaiError(w, status, err.Error())
			return
		}
		b.RequestIDs = append(b.RequestIDs, ids...)
		for _, id := range ids {
			b.ids[id] = true
		}
		s.xaiSave(b)
		writeJSON(w, http.StatusOK, map[string]any{})
	})(w, r)
}

// xaiAddAllowed counts an add-requests call against the team's window.
func (s *Server) xaiAddAllowed(now time.Time) bool {
	keep := s.xai.adds[:0]
	for _, t := range s.xai.adds {
		if now.Sub(t) < xaiAddWindow {
			keep = append(keep, t)
		}
	}
	s.xai.adds = keep
	if len(keep) >= xaiAddCalls {
		return false
	}
	s.xai.adds = append(s.xai.adds, now)
	return true
}

// check validates the items of an add-requests call: each names a
// batch_request_id new to the batch (and to the call) and carries a
// chat_get_completion with a model and messages.
func (b *xaiBatch) check(items []json.RawMessage) (ids []string, msg string) {
	if len(items) == 0 {
		return nil, "batch_requests: at least one request is required"
	}
	seen := map[string]bool{}
	for i, raw := range items {
		var it struct {
			ID  string `json:"batch_request_id"`
			Req struct {
				Chat *struct {
					Model    string            `json:"model"`
					Messages []json.RawMessage `json:"messages"`
				} `json:"chat_get_completion"`
			} `json:"batch_request"`
		}
		switch err := json.Unmarshal(raw, &it); {
		case err != nil:
			return nil, fmt.Sprintf("batch_requests[%d]: %v", i, err)
		case it.ID == "":
			return nil, fmt.Sprintf("batch_requests[%d]: batch_request_id is required", i)
		case b.ids[it.ID] || seen[it.ID]:
			return nil, fmt.Sprintf("batch_requests[%d]: batch_request_id %q is already in batch %s", i, it.ID, b.ID)
		case it.Req.Chat == nil || it.Req.Chat.Model == "" || len(it.Req.Chat.Messages) == 0:
			return nil, fmt.Sprintf("batch_requests[%d]: batch_request.chat_get_completion needs a model and messages", i)
		}
		seen[it.ID] = true
		ids = append(ids, it.ID)
	}
	return ids, ""
}

// xaiSegment makes a segment of b from the request lines write puts in
// its spool, and starts it. Caller holds s.mu.
func (s *Server) xaiSegment(b *xaiBatch, now time.Time, write func(dst string) error) (int, error) {
	seq := s.nextSeq()
	id := "xseg_" + hexID(s.opts.Seed, "xseg", b.ID, int(seq), 16)
	if err := write(s.batchInput(id)); err != nil {
		return http.StatusInternalServerError, err
	}
	n, err := countLines(s.batchInput(id))
	if err != nil || n == 0 {
		os.Remove(s.batchInput(id))
		if err == nil {
			return http.StatusBadRequest, fmt.Errorf("the input holds no request")
		}
		return http.StatusInternalServerError, err
	}
	seg := &batchRec{ID: id, Family: famXAI, Seq: seq, Created: now, Endpoint: "/v1/chat/completions",
		DisplayName: b.ID, JobKey: jobKeyFromFilename(b.Name), N: n, Status: stValidating}
	s.batches[id], s.active[id] = seg, seg
	s.saveBatch(seg)
	b.Segments = append(b.Segments, id)
	return 0, nil
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			n++
		}
	}
	return n, sc.Err()
}

// xaiJSON renders a Batch: no status, the counts of its requests.
func (s *Server) xaiJSON(b *xaiBatch) map[string]any {
	var total, pending, ok, failed, cancelled int
	for _, id := range b.Segments {
		seg := s.batches[id]
		if seg == nil {
			continue
		}
		total += seg.N
		if !terminal(seg.Status) {
			pending += seg.N
			continue
		}
		ok += seg.Counts.Succeeded
		failed += seg.Counts.Errored
		cancelled += seg.Counts.Cancelled + seg.Counts.Expired
		if seg.Status == stCancelled && seg.InProgressAt == nil {
			cancelled += seg.N // cancelled before anything of it ran
		}
		if seg.Status == stFailed {
			failed += seg.N - seg.Counts.Succeeded - seg.Counts.Errored - seg.Counts.Cancelled - seg.Counts.Expired
		}
	}
	var cancelTime any
	if b.CancelTime != nil {
		cancelTime = b.CancelTime.UTC().Format(time.RFC3339Nano)
	}
	var input any
	if b.InputFileID != "" {
		input = b.InputFileID
	}
	return map[string]any{
		"batch_id": b.ID, "name": b.Name, "create_time": b.Created.UTC().Format(time.RFC3339Nano),
		"expire_time": b.Created.Add(completionWindow).UTC().Format(time.RFC3339Nano), "create_api_key_id": "key_emulator",
		"cancel_time": cancelTime, "cancel_by_xai_message": nil, "input_file_id": input,
		"state": map[string]any{"num_requests": total, "num_pending": pending, "num_success": ok,
			"num_error": failed, "num_cancelled": cancelled},
		"cost_breakdown": map[string]any{"total_cost_usd_ticks": 0, "endpoint_costs": []any{}},
	}
}

// xaiPageArgs reads limit (default xaiPage, at most xaiMaxPage) and
// pagination_token (an offset, as text, in this emulator).
func xaiPageArgs(w http.ResponseWriter, r *http.Request) (limit, from int, ok bool) {
	q := r.URL.Query()
	limit = xaiPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			xaiError(w, http.StatusBadRequest, "limit: want a positive integer")
			return 0, 0, false
		}
		limit = min(n, xaiMaxPage)
	}
	if v := q.Get("pagination_token"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			xaiError(w, http.StatusBadRequest, "pagination_token: not a token of this listing")
			return 0, 0, false
		}
		from = n
	}
	return limit, from, true
}

// xaiNext is the pagination_token after a page of limit from from, of
// total entries (null after the last).
func xaiNext(from, limit, total int) any {
	if from+limit >= total {
		return nil
	}
	return strconv.Itoa(from + limit)
}

// xaiList serves GET /batches, newest first.
func (s *Server) xaiList(w http.ResponseWriter, r *http.Request) {
	limit, from, ok := xaiPageArgs(w, r)
	if !ok {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	all := make([]*xaiBatch, 0, len(s.xai.batches))
	for _, b := range s.xai.batches {
		all = append(all, b)
	}
	slices.SortFunc(all, func(a, b *xaiBatch) int { return int(b.Seq - a.Seq) })
	out := []any{}
	for _, b := range all[min(from, len(all)):min(from+limit, len(all))] {
		out = append(out, s.xaiJSON(b))
	}
	writeJSON(w, http.StatusOK, map[string]any{"batches": out, "pagination_token": xaiNext(from, limit, len(all))})
}

// xaiCancel stops a batch: requests not yet run are cancelled.
func (s *Server) xaiCancel(w http.ResponseWriter, r *http.Request, b *xaiBatch, now time.Time) {
	if b.CancelTime == nil {
		b.CancelTime = &now
		for _, id := range b.Segments {
			if seg := s.batches[id]; seg != nil {
				s.cancel(seg, now)
			}
		}
		s.xaiSave(b)
	}
	writeJSON(w, http.StatusOK, s.xaiJSON(b))
}

// xaiRows calls fn with each result row of b's ended segments, in order.
func (s *Server) xaiRows(b *xaiBatch, fn func(row []byte) error) error {
	for _, id := range b.Segments {
		seg := s.batches[id]
		if seg == nil || !terminal(seg.Status) {
			continue
		}
		f, err := os.Open(s.batchResults(id))
		if os.IsNotExist(err) && seg.Status == stCancelled {
			// Cancelled before anything of it ran: every request is
			// CANCELLED.
			err = s.xaiCancelledRows(seg, fn)
		} else if err == nil {
			err = eachRow(f, fn)
			f.Close()
		}
		if err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// xaiCancelledRows calls fn with a CANCELLED row for each request of seg.
func (s *Server) xaiCancelledRows(seg *batchRec, fn func(row []byte) error) error {
	f, err := os.Open(s.batchInput(seg.ID))
	if err != nil {
		return err
	}
	defer f.Close()
	i := 0
	return eachRow(f, func(line []byte) error {
		r := s.runXAILine(seg, i, line, false, stCancelled, 0)
		i++
		return fn(r.data)
	})
}

var errPageFull = fmt.Errorf("page full")

// eachRow calls fn with each non-blank line of r, trimmed, until fn
// returns an error (which it returns) or r ends.
func eachRow(r io.Reader, fn func([]byte) error) error {
	var ferr error
	err := eachLine(r, func(t []byte, _ int) bool { ferr = fn(t); return ferr == nil })
	if ferr != nil {
		return ferr
	}
	return err
}

// xaiResults serves GET /batches/{id}/results: the rows of the requests
// that ran (or were cancelled), paginated.
func (s *Server) xaiResults(w http.ResponseWriter, r *http.Request, b *xaiBatch, now time.Time) {
	limit, from, ok := xaiPageArgs(w, r)
	if !ok {
		return
	}
	rows := []json.RawMessage{}
	i := 0
	err := s.xaiRows(b, func(row []byte) error {
		if i >= from && len(rows) < limit+1 {
			rows = append(rows, json.RawMessage(bytes.Clone(row)))
		}
		i++
		if len(rows) > limit {
			return errPageFull
		}
		return nil
	})
	if err != nil && err != errPageFull {
		xaiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var next any
	if len(rows) > limit {
		rows, next = rows[:limit], strconv.Itoa(from+limit)
	}
	s.bump(func(st *Stats) { st.noteDownload(b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"results": rows, "pagination_token": next})
}

// xaiRequests serves GET /batches/{id}/requests: each request's state.
func (s *Server) xaiRequests(w http.ResponseWriter, r *http.Request, b *xaiBatch, now time.Time) {
	limit, from, ok := xaiPageArgs(w, r)
	if !ok {
		return
	}
	state := map[string]string{}
	err := s.xaiRows(b, func(row []byte) error {
		var x struct {
			ID     string `json:"batch_request_id"`
			Result struct {
				Error *struct {
					Code int `json:"code"`
				} `json:"error"`
			} `json:"batch_result"`
		}
		if json.Unmarshal(row, &x) == nil {
			state[x.ID] = "STATE_SUCCEEDED"
			if e := x.Result.Error; e != nil && e.Code == 1 {
				state[x.ID] = "STATE_CANCELLED"
			} else if e != nil {
				state[x.ID] = "STATE_FAILED"
			}
		}
		return nil
	})
	if err != nil {
		xaiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := []any{}
	for _, id := range b.RequestIDs[min(from, len(b.RequestIDs)):min(from+limit, len(b.RequestIDs))] {
		st := state[id]
		if st == "" {
			st = "STATE_PENDING"
		}
		out = append(out, map[string]any{"batch_request_id": id, "state": st})
	}
	writeJSON(w, http.StatusOK, map[string]any{"batch_request_metadata": out,
		"pagination_token": xaiNext(from, limit, len(b.RequestIDs))})
}

// runXAILine produces the result row of line i of segment b: the chat
// completion, a google.rpc.Status error, or CANCELLED (code 1) for a
// request that did not run.
func (s *Server) runXAILine(b *batchRec, i int, line []byte, done bool, undone string, created int64) lineResult {
	var it struct {
		ID  string `json:"batch_request_id"`
		Req struct {
			Chat json.RawMessage `json:"chat_get_completion"`
		} `json:"batch_request"`
	}
	json.Unmarshal(line, &it)
	r := lineResult{customID: it.ID, dest: destOut}
	rpcErr := func(code int, msg string) []byte {
		return mustJSON(map[string]any{"batch_request_id": it.ID, "batch_result": map[string]any{
			"error": map[string]any{"code": code, "message": msg}}})
	}
	if !done {
		r.kind = unrun(undone)
		r.data = rpcErr(1, "The request was cancelled before it ran.")
		return r
	}
	var m modelOut
	f := s.lineFate(b, i)
	inj, isInjected := injectedErr(&xaiLineErrs, f)
	switch {
	case isInjected:
		m = modelOut{status: inj.status, body: oaiErrorBody(inj.msg, "", "")}
	case f == fateOmit:
		m = s.runOpenAI("/v1/chat/completions", it.Req.Chat, created)
		r.kind, r.dest, r.in, r.out = outOmitted, destNone, m.in, m.out
		return r
	default:
		m = s.runOpenAI("/v1/chat/completions", it.Req.Chat, created)
	}
	r.in, r.out = m.in, m.out
	if m.status/100 == 2 {
		r.kind = outSucceeded
		r.data = mustJSON(map[string]any{"batch_request_id": it.ID, "batch_result": map[string]any{
			"response": map[string]any{"chat_get_completion": json.RawMessage(m.body)}}})
		return r
	}
	code := map[int]int{400: 3, 401: 16, 403: 7, 404: 5, 429: 8, 503: 14, 504: 4}[m.status]
	if code == 0 {
		code = 13
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(m.body, &e)
	r.kind, r.data = outErrored, rpcErr(code, e.Error.Message)
	return r
}

// xaiDir is where batches are kept (DataDir only).
func (s *Server) xaiDir() string { return filepath.Join(s.dir, "xai") }

// xaiSave persists b. Caller holds s.mu.
func (s *Server) xaiSave(b *xaiBatch) {
	if !s.persist {
		return
	}
	if err := os.MkdirAll(s.xaiDir(), 0o755); err != nil {
		s.logf("emulator: saving xai batch %s: %v", b.ID, err)
		return
	}
	if err := writeJSONAtomic(filepath.Join(s.xaiDir(), b.ID+".json"), b); err != nil {
		s.logf("emulator: saving xai batch %s: %v", b.ID, err)
	}
}

// xaiLoad reads the batches an earlier Server left in DataDir.
func (s *Server) xaiLoad() error {
	s.xai.batches = map[string]*xaiBatch{}
	ents, err := os.ReadDir(s.xaiDir())
	if os.IsNotExist(err) || !s.persist {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		var b xaiBatch
		if err := readJSON(filepath.Join(s.xaiDir(), e.Name()), &b); err != nil {
			return err
		}
		b.ids = make(map[string]bool, len(b.RequestIDs))
		for _, id := range b.RequestIDs {
			b.ids[id] = true
		}
		s.xai.batches[b.ID] = &b
	}
	return nil
}

// xaiLineErrs are the line errors the emulator injects into xAI's results
// (see injectedErr).
var xaiLineErrs = [3]injected{
	{status: 429, msg: "Resource exhausted (injected by the emulator's LineErrorRate)."},
	{status: 500, msg: "Internal error (injected by the emulator's LineErrorRate)."},
	{status: 400, msg: "Invalid argument (permanent error injected by the emulator's LineErrorRate)."},
}
