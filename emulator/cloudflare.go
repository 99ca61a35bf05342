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
	"strings"
	"time"
)

func (s *Server) cloudflareRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /client/v4/accounts/{account}/ai/run/{model...}", cloudflareFam.h(s.cfRun))
}

// cfEncodedSlash reports whether the request's path carries a
// percent-encoded slash (%2F). The live API routes on the path as sent:
// .../ai/run/@cf%2Fmeta%2F..., what the official SDKs send by default
// (cloudflare-typescript PR 2796, cloudflare-python issue 2718), is
// answered 400 code 7000 "No route for that URI". Go's ServeMux would
// decode it and match the model, so the raw path is checked first.
func cfEncodedSlash(r *http.Request) bool {
	return strings.Contains(strings.ToLower(r.URL.EscapedPath()), "%2f")
}

// cfHasCredentials reports whether a call carries an API token
// (Authorization) or a global API key (X-Auth-Key with X-Auth-Email).
func cfHasCredentials(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || r.Header.Get("X-Auth-Key") != "" && r.Header.Get("X-Auth-Email") != ""
}

// cfRun serves POST /client/v4/accounts/{account}/ai/run/{model...}:
// with ?queueRequest=true and {"requests":[…]} it queues an async batch;
// a body {"request_id":…} (with or without queueRequest) polls one; any
// other body runs the model once, synchronously.
// cfBad is a Cloudflare 400 with numeric code num.
func cfBad(num int, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Num: num, Msg: msg}
}

func (s *Server) cfRun(w http.ResponseWriter, r *http.Request) error {
	account, model := r.PathValue("account"), r.PathValue("model")
	maxBytes := s.opts.CloudflareMaxBytes
	tooLarge := &apiError{Status: http.StatusRequestEntityTooLarge, Num: 3006,
		Msg: fmt.Sprintf("Request is too large: the payload must be under %s bytes.", commas(maxBytes))}
	if r.ContentLength >= maxBytes {
		return tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBytes))
	if err != nil {
		return cfBad(3003, "Incomplete request: "+err.Error())
	}
	if int64(len(body)) >= maxBytes {
		return tooLarge
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil || probe == nil {
		return cloudflareFam.badBody(err)
	}
	if rid, ok := probe["request_id"]; ok && probe["requests"] == nil {
		var id string
		json.Unmarshal(rid, &id)
		return s.cfPoll(w, account, id)
	}
	if r.URL.Query().Get("queueRequest") != "true" {
		if probe["requests"] != nil {
			return cfBad(5004, "Invalid data: 'requests' needs ?queueRequest=true.")
		}
		return s.cfRunSync(w, r, model, body)
	}
	// Only the async-capable models queue a batch: the live API refuses
	// the others (5007), so the emulator does too unless told otherwise.
	if !s.opts.CloudflareAnyModel && !slices.Contains(s.opts.CloudflareModels, model) {
		return cfBad(5007, "No such model "+model+" or task (async batch queueing is not supported for it; "+
			"the emulator knows "+strings.Join(s.opts.CloudflareModels, ", ")+")")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(probe["requests"], &items); err != nil || len(items) == 0 {
		return cfBad(3003, "Incomplete request: 'requests' must be a non-empty array.")
	}
	return s.cfSubmit(w, account, model, items)
}

// cfRunSync runs the model once, synchronously.
func (s *Server) cfRunSync(w http.ResponseWriter, r *http.Request, model string, body []byte) error {
	res, _, _, err := s.runCloudflare(model, body)
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadRequest
	}
	// Counted like the batches' items: under no job, by custom_id
	// (their external_reference).
	s.countSync(famCloudflare, "", r, status)
	if s.syncWait(r) != nil {
		return nil
	}
	if err != nil {
		return cfBad(5004, err.Error())
	}
	writeJSON(w, http.StatusOK, cfOK(json.RawMessage(res)))
	return nil
}

// cfOK is the v4 envelope of a successful answer.
func cfOK(result any) map[string]any {
	return map[string]any{"result": result, "success": true, "errors": []any{}, "messages": []any{}}
}

func (s *Server) cfSubmit(w http.ResponseWriter, account, model string, items []json.RawMessage) error {
	spool, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "cfspool-*")
	if err != nil {
		return err
	}
	defer func() { spool.Close(); os.Remove(spool.Name()) }()
	bw := bufio.NewWriter(spool)
	var tokens int64
	var line bytes.Buffer
	for i, it := range items {
		err := checkCFReference(it)
		if err == nil {
			err = validateCloudflare(model, it)
		}
		if err != nil {
			return cfBad(5004, fmt.Sprintf("Invalid data in /requests/%d: %v", i, err))
		}
		line.Reset()
		json.Compact(&line, it)
		line.WriteByte('\n')
		bw.Write(line.Bytes())
		tokens += approxTokens(len(it))
	}
	// A spool that could not be written (a full disk) is the emulator's
	// failure: answer 500, as the API does for its own.
	err = bw.Flush()
	if err == nil {
		err = spool.Close()
	}
	if err != nil {
		return err
	}
	return s.ticked(func(now time.Time) error {
		seq := s.nextSeq()
		id := uuidFrom(s.opts.Seed, "cfreq", "", int(seq))
		if err := os.Rename(spool.Name(), s.batchInput(id)); err != nil {
			return err
		}
		b := &batchRec{ID: id, Family: famCloudflare, Seq: seq, Created: now, Model: model, Account: account,
			N: len(items), Tokens: tokens, Status: stValidating}
		s.register(w, b, http.StatusOK, func() any {
			return cfOK(map[string]any{"status": "queued", "request_id": id, "model": model})
		})
		return nil
	})
}

func (s *Server) cfPoll(w http.ResponseWriter, account, id string) error {
	var in, out int64
	var cut bool
	var f *os.File
	err := s.withBatch(cloudflareFam, id, func(b *batchRec, _ time.Time) error {
		switch {
		case b.Account != account:
			return cloudflareFam.noBatch(id)
		case b.Status == stValidating:
			writeJSON(w, http.StatusOK, cfOK(map[string]any{"status": "queued", "request_id": id}))
			return nil
		case b.Status == stInProgress:
			writeJSON(w, http.StatusOK, cfOK(map[string]any{"status": "running", "request_id": id}))
			return nil
		}
		in, out = b.InputTokens, b.OutputTokens
		cut = s.truncates(id)
		var err error
		if f, err = os.Open(s.batchResults(id)); err != nil {
			return &apiError{Status: http.StatusInternalServerError, Num: 7500, Msg: "Results are unavailable: " + err.Error()}
		}
		return nil
	})
	if err != nil || f == nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/json")
	if cut {
		var buf bytes.Buffer
		writeCFAnswer(&buf, f, in, out)
		s.serveCut(w, int64(buf.Len()), &buf)
	}
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	writeCFAnswer(bw, f, in, out)
	bw.Flush()
	return nil
}

// writeCFAnswer streams {"result":{"responses":[…],"usage":{…}},…} from the
// JSONL results in f.
func writeCFAnswer(bw io.Writer, f io.Reader, in, out int64) {
	io.WriteString(bw, `{"result":{"responses":[`)
	first := true
	eachLine(f, func(l []byte, _ int) bool {
		if !first {
			bw.Write([]byte{','})
		}
		first = false
		bw.Write(l)
		return true
	})
	fmt.Fprintf(bw, `],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}},"success":true,"errors":[],"messages":[]}`,
		in, out, in+out)
	io.WriteString(bw, "\n")
}
