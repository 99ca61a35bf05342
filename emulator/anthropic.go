package emulator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"
)

var customIDRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// limitReader fails with errTooLarge once more than n bytes were read.
type limitReader struct {
	r io.Reader
	n int64
}

// Read fails for good once the limit is passed, and hands out none of the
// bytes that passed it: json.Decoder keeps bytes that come with an error
// and would parse them (More reports false on the error, the next Token
// finds the bytes), turning "too large" into a syntax error.
func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooLarge
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	if l.n < 0 {
		return 0, errTooLarge
	}
	return k, err
}

func (s *Server) anthropicRoutes(mux *http.ServeMux) {
	h := anthropicFam.h
	mux.HandleFunc("POST /v1/messages", h(s.antMessages))
	mux.HandleFunc("POST /v1/messages/batches", h(s.antCreate))
	mux.HandleFunc("GET /v1/messages/batches", h(s.antList))
	mux.HandleFunc("GET /v1/messages/batches/{id}", s.getBatch(anthropicFam, "id", func(b *batchRec, r *http.Request, _ time.Time) any {
		return s.antBatchJSON(b, r)
	}))
	mux.HandleFunc("DELETE /v1/messages/batches/{id}", h(s.antDelete))
	mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", h(s.antCancel))
	mux.HandleFunc("GET /v1/messages/batches/{id}/results", h(s.antResults))
}

// antCreate decodes {"requests":[…]} item by item with a json.Decoder,
// validating each item and spooling it to disk, so a 256 MB body is never
// held in memory as a value tree.
func (s *Server) antCreate(w http.ResponseWriter, r *http.Request) error {
	maxBytes := s.opts.AnthropicMaxBytes
	tooLarge := errf(http.StatusRequestEntityTooLarge, "Request exceeds the maximum size of %s bytes.", commas(maxBytes))
	if r.ContentLength > maxBytes {
		return tooLarge
	}
	spool, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "antspool-*")
	if err != nil {
		return err
	}
	defer func() { spool.Close(); os.Remove(spool.Name()) }()
	n, tokens, model, err := s.antDecode(&limitReader{r: r.Body, n: maxBytes}, spool)
	if err == nil {
		err = spool.Close()
	}
	var ce *apiError
	switch {
	case err == nil:
	case errors.Is(err, errTooLarge):
		return tooLarge
	case errors.As(err, &ce):
		return ce
	default:
		return anthropicFam.badBody(err)
	}
	return s.ticked(func(now time.Time) error {
		if lim := s.opts.EnqueuedTokenLimit; lim > 0 && s.enqueued(famAnthropic, model, "")+tokens > lim {
			return errf(http.StatusTooManyRequests,
				"Number of enqueued batch tokens for %s exceeds your organization's limit of %s. Try again once some batches have ended.",
				model, commas(lim))
		}
		seq := s.nextSeq()
		id := "msgbatch_01" + b58ID(s.opts.Seed, "msgbatch", "", int(seq), 22)
		if err := os.Rename(spool.Name(), s.batchInput(id)); err != nil {
			return err
		}
		b := &batchRec{ID: id, Family: famAnthropic, Seq: seq, Created: now, Model: model, N: n, Tokens: tokens,
			ExpireFate: s.fated("expire", id, 0, s.opts.ExpireRate),
			Status:     stInProgress, InProgressAt: &now}
		s.register(w, b, http.StatusOK, func() any { return s.antBatchJSON(b, r) })
		return nil
	})
}

// antDecode streams the create body into spool as JSONL
// {"custom_id":…,"params":…} lines. model is the first item's model.
func (s *Server) antDecode(body io.Reader, spool io.Writer) (n int, tokens int64, model string, err error) {
	dec := json.NewDecoder(bufio.NewReaderSize(body, 256<<10))
	bw := bufio.NewWriterSize(spool, 256<<10)
	bad := func(format string, args ...any) error { return errf(http.StatusBadRequest, format, args...) }
	if err := expectDelim(dec, '{'); err != nil {
		return 0, 0, "", err
	}
	seen := map[string]struct{}{}
	found := false
	var line bytes.Buffer
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, 0, "", err
		}
		if key, _ := tok.(string); key != "requests" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, 0, "", err
			}
			continue
		}
		found = true
		if err := expectDelim(dec, '['); err != nil {
			return 0, 0, "", bad("requests: Input should be a valid list")
		}
		for dec.More() {
			var it struct {
				CustomID *string         `json:"custom_id"`
				Params   json.RawMessage `json:"params"`
			}
			if err := dec.Decode(&it); err != nil {
				return 0, 0, "", err
			}
			if n >= s.opts.AnthropicMaxRequests {
				return 0, 0, "", errf(http.StatusRequestEntityTooLarge, "A batch may contain at most %d requests.", s.opts.AnthropicMaxRequests)
			}
			var p struct {
				Model     string          `json:"model"`
				MaxTokens *int64          `json:"max_tokens"`
				Messages  json.RawMessage `json:"messages"`
			}
			switch {
			case it.CustomID == nil:
				return 0, 0, "", bad("requests.%d.custom_id: Field required", n)
			case !customIDRe.MatchString(*it.CustomID):
				return 0, 0, "", bad("requests.%d.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", n)
			case len(it.Params) == 0 || string(it.Params) == "null":
				return 0, 0, "", bad("requests.%d.params: Field required", n)
			case json.Unmarshal(it.Params, &p) != nil:
				return 0, 0, "", bad("requests.%d.params: Input should be a valid dictionary", n)
			}
			if msg := checkAnthropicParams(p.Model, p.MaxTokens, len(p.Messages) > 0 && string(p.Messages) != "null"); msg != "" {
				return 0, 0, "", bad("requests.%d.params.%s", n, msg)
			}
			if _, dup := seen[*it.CustomID]; dup {
				return 0, 0, "", bad("requests.%d.custom_id: Duplicate custom_id %q; custom_id values must be unique within a batch", n, *it.CustomID)
			}
			seen[*it.CustomID] = struct{}{}
			if model == "" {
				model = p.Model
			}
			line.Reset()
			line.WriteString(`{"custom_id":`)
			line.Write(mustJSON(*it.CustomID))
			line.WriteString(`,"params":`)
			if err := json.Compact(&line, it.Params); err != nil {
				return 0, 0, "", err
			}
			line.WriteString("}\n")
			if _, err := bw.Write(line.Bytes()); err != nil {
				return 0, 0, "", err
			}
			tokens += approxTokens(len(it.Params))
			n++
		}
		if err := expectDelim(dec, ']'); err != nil {
			return 0, 0, "", err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return 0, 0, "", err
	}
	switch {
	case !found:
		return 0, 0, "", bad("requests: Field required")
	case n == 0:
		return 0, 0, "", bad("requests: List should have at least 1 item after validation, not 0")
	}
	return n, tokens, model, bw.Flush()
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("expected %q, got %v", d, tok)
	}
	return nil
}

func rfc3339(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// antBatchJSON renders a MessageBatch.
func (s *Server) antBatchJSON(b *batchRec, r *http.Request) map[string]any {
	ts := func(t *time.Time) any { return optTime(t, func(t time.Time) any { return rfc3339(t) }) }
	status := "in_progress"
	counts := map[string]any{"processing": b.N, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	var results any
	switch {
	case terminal(b.Status):
		status = "ended"
		c := b.Counts
		if b.Status == stFailed {
			c = lineCounts{Errored: b.N}
		}
		counts = map[string]any{"processing": 0, "succeeded": c.Succeeded, "errored": c.Errored,
			"canceled": c.Cancelled, "expired": c.Expired}
		results = baseURL(r) + "/v1/messages/batches/" + b.ID + "/results"
	case b.Status == stCancelling:
		status = "canceling"
	}
	return map[string]any{"id": b.ID, "type": "message_batch", "processing_status": status,
		"request_counts": counts, "ended_at": ts(b.endedAt()), "created_at": rfc3339(b.Created),
		"expires_at": rfc3339(b.Created.Add(completionWindow)), "archived_at": nil,
		"cancel_initiated_at": ts(b.CancellingAt), "results_url": results}
}

func (s *Server) antList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, ok := queryLimit(q.Get("limit"), 20, 1000)
	if !ok {
		return errf(400, "limit: Input should be between 1 and 1000")
	}
	before, after := q.Get("before_id"), q.Get("after_id")
	if before != "" && after != "" {
		return errf(400, "Only one of before_id and after_id may be given")
	}
	return s.ticked(func(time.Time) error {
		all := s.sortedBatches(famAnthropic)
		idx := func(id string) int { return slices.IndexFunc(all, func(b *batchRec) bool { return b.ID == id }) }
		var page []*batchRec
		var more bool
		switch {
		case before != "":
			end := max(idx(before), 0)
			start := max(end-limit, 0)
			page, more = all[start:end], start > 0
		default:
			start := 0
			if after != "" {
				start = idx(after) + 1
				if start == 0 {
					start = len(all)
				}
			}
			end := min(start+limit, len(all))
			page, more = all[start:end], end < len(all)
		}
		data := make([]any, len(page))
		for i, b := range page {
			data[i] = s.antBatchJSON(b, r)
		}
		var first, last any
		if len(page) > 0 {
			first, last = page[0].ID, page[len(page)-1].ID
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": more, "first_id": first, "last_id": last})
		return nil
	})
}

func (s *Server) antCancel(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(anthropicFam, r.PathValue("id"), func(b *batchRec, now time.Time) error {
		if !s.cancel(b, now) {
			return errf(http.StatusBadRequest, "Message batch "+b.ID+" has already ended and cannot be canceled.")
		}
		writeJSON(w, http.StatusOK, s.antBatchJSON(b, r))
		return nil
	})
}

func (s *Server) antDelete(w http.ResponseWriter, r *http.Request) error {
	return s.withBatch(anthropicFam, r.PathValue("id"), func(b *batchRec, _ time.Time) error {
		if !terminal(b.Status) {
			return errf(http.StatusBadRequest,
				"Message batch "+b.ID+" has not ended yet; cancel it and wait until it has ended before deleting it.")
		}
		s.deleteBatch(b)
		writeJSON(w, http.StatusOK, map[string]any{"id": b.ID, "type": "message_batch_deleted"})
		return nil
	})
}

func (s *Server) antResults(w http.ResponseWriter, r *http.Request) error {
	var cut bool
	var f *os.File
	err := s.withBatch(anthropicFam, r.PathValue("id"), func(b *batchRec, _ time.Time) error {
		switch {
		case !terminal(b.Status):
			return errf(http.StatusBadRequest, "Message batch "+b.ID+" has not ended yet; results are not available.")
		case b.OutputLost:
			return errf(http.StatusNotFound, "Results of message batch "+b.ID+" not found.")
		}
		cut = s.truncates(b.ID)
		f, _ = os.Open(s.batchResults(b.ID))
		return nil
	})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	if f == nil {
		w.WriteHeader(http.StatusOK) // a failed batch has no results
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		if cut && st.Size() > 0 {
			s.serveCut(w, st.Size(), f)
		}
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	}
	w.WriteHeader(http.StatusOK)
	io.Copy(w, f)
	return nil
}

// antMessages serves POST /v1/messages directly.
func (s *Server) antMessages(w http.ResponseWriter, r *http.Request) error {
	body, err := readLimited(r, 32<<20)
	if err != nil {
		return errf(http.StatusRequestEntityTooLarge, err.Error())
	}
	if !s.syncAdmit(w, famAnthropic) {
		return nil
	}
	m := s.runAnthropic(body, "standard")
	// Anthropic's custom_ids are job-wide in the emulator's count ("").
	s.countSync(famAnthropic, "", r, m.status)
	if s.syncWait(r) != nil {
		return nil
	}
	if m.status != 200 {
		var e struct{ Type, Message string }
		json.Unmarshal(m.body, &e)
		antError(w, m.status, e.Type, e.Message)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(m.body)
	return nil
}
