package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-batch/sluice/objstore"
)

// The Vertex AI batch prediction family (docs/providers/vertex.md):
// projects.locations.batchPredictionJobs (create, get, list, cancel,
// delete), served at the root of the port (/v1/projects/... and the
// google-genai SDK's /v1beta1/projects/...), because Google's clients take
// a host and port but no path prefix. A job reads its input JSONL from,
// and writes predictions.jsonl to, the GCS server at Options.GCSHost
// (`sluice emulate` passes STORAGE_EMULATOR_HOST; through the official
// client, objstore.GCS); without one, create is refused (the emulator
// never reaches the network beyond loopback). Its handlers are built on
// the core (core.go) with vertexFam, Google's envelope.
//
// Input lines are {"request": GenerateContentRequest, ...}; every other
// top-level field (sluice's "key") is echoed into the output line, as the
// service does. Output lines are {"status":"", "processed_time",
// "request", "response", ...} or {"status":"<HTTP reason>: <error JSON>",
// ...}, in processing order (not input order). A job lives at least
// VertexMinBatchTime (PENDING its first tenth), so cancel can be
// exercised.

const famVertex = "vertex"

// Keys of a Vertex job's batchRec.Metadata.
const (
	vtxOutPrefix = "vertex_output_uri_prefix"
	vtxInURIs    = "vertex_input_uris" // newline-separated
	vtxModel     = "vertex_model"      // as given on create
	vtxLabel     = "label:"            // prefix of the job's labels
)

// vtxPrecondition is a 400 FAILED_PRECONDITION (errf's message, the
// status name in Type).
func vtxPrecondition(format string, args ...any) *apiError {
	e := errf(http.StatusBadRequest, format, args...)
	e.Type = "FAILED_PRECONDITION"
	return e
}

func (s *Server) vertexRoutes(mux *http.ServeMux) {
	h := vertexFam.h
	for _, v := range []string{"/v1", "/v1beta1"} {
		base := v + "/projects/{project}/locations/{location}/batchPredictionJobs"
		mux.HandleFunc("POST "+base, h(s.vtxCreate))
		mux.HandleFunc("GET "+base, h(s.vtxList))
		mux.HandleFunc("GET "+base+"/{id}", h(s.vtxGet))
		mux.HandleFunc("POST "+base+"/{id}", h(s.vtxCancel)) // {id}:cancel
		mux.HandleFunc("DELETE "+base+"/{id}", h(s.vtxDelete))
	}
}

func vtxParent(r *http.Request) string {
	return "projects/" + r.PathValue("project") + "/locations/" + r.PathValue("location")
}

type vtxCreateReq struct {
	DisplayName string `json:"displayName"`
	Model       string `json:"model"`
	InputConfig *struct {
		InstancesFormat string `json:"instancesFormat"`
		GcsSource       *struct {
			URIs []string `json:"uris"`
		} `json:"gcsSource"`
	} `json:"inputConfig"`
	OutputConfig *struct {
		PredictionsFormat string `json:"predictionsFormat"`
		GcsDestination    *struct {
			OutputURIPrefix string `json:"outputUriPrefix"`
		} `json:"gcsDestination"`
	} `json:"outputConfig"`
	Labels map[string]string `json:"labels"`
}

// check validates a create request; it returns the input URIs and the
// output prefix.
func (q *vtxCreateReq) check() ([]string, string, error) {
	bad := func(format string, args ...any) ([]string, string, error) {
		return nil, "", errf(http.StatusBadRequest, format, args...)
	}
	switch {
	case q.DisplayName == "":
		return bad("BatchPredictionJob.display_name is required.")
	case q.Model == "":
		return bad("BatchPredictionJob.model is required.")
	case q.InputConfig == nil || q.InputConfig.GcsSource == nil || len(q.InputConfig.GcsSource.URIs) == 0:
		return bad("BatchPredictionJob.input_config.gcs_source.uris is required (only Cloud Storage input is emulated).")
	case q.InputConfig.InstancesFormat != "jsonl":
		return bad("Unsupported instances format %q: the emulator takes jsonl.", q.InputConfig.InstancesFormat)
	case q.OutputConfig == nil || q.OutputConfig.GcsDestination == nil || q.OutputConfig.GcsDestination.OutputURIPrefix == "":
		return bad("BatchPredictionJob.output_config.gcs_destination.output_uri_prefix is required (only Cloud Storage output is emulated).")
	case q.OutputConfig.PredictionsFormat != "jsonl":
		return bad("Unsupported predictions format %q: the emulator writes jsonl.", q.OutputConfig.PredictionsFormat)
	}
	out := q.OutputConfig.GcsDestination.OutputURIPrefix
	for _, u := range append(slices.Clone(q.InputConfig.GcsSource.URIs), out) {
		if loc, err := objstore.Parse(u); err != nil || !loc.GCS {
			return bad("%q is not a gs:// URI.", u)
		}
	}
	return q.InputConfig.GcsSource.URIs, out, nil
}

// vtxModelName is the model of a job ("gemini-2.5-flash" of
// publishers/google/models/gemini-2.5-flash or of a full resource name).
func vtxModelName(m string) string { return m[strings.LastIndex(m, "/")+1:] }

// vtxGCS opens the bucket of a gs:// URI at Options.GCSHost, and gives
// the key.
func (s *Server) vtxGCS(ctx context.Context, uri string) (*objstore.GCS, string, error) {
	if s.opts.GCSHost == "" {
		return nil, "", vtxPrecondition("The emulator's Vertex AI family reads and writes Cloud Storage at STORAGE_EMULATOR_HOST, which is not set.")
	}
	loc, err := objstore.Parse(uri)
	if err != nil || !loc.GCS {
		return nil, "", errf(http.StatusBadRequest, "%q is not a gs:// URI.", uri)
	}
	g, err := objstore.NewGCS(ctx, loc.Bucket, "", objstore.GCSOptions{Emulator: s.opts.GCSHost})
	if err != nil {
		return nil, "", err
	}
	return g, loc.Key, nil
}

// vtxImport copies the job's input objects, one after the other, to the
// batch's input file.
func (s *Server) vtxImport(ctx context.Context, uris []string, dst string) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, u := range uris {
		if err := s.vtxCopyObject(ctx, u, f); err != nil {
			return err
		}
	}
	return f.Sync()
}

func (s *Server) vtxCopyObject(ctx context.Context, uri string, w io.Writer) error {
	g, key, err := s.vtxGCS(ctx, uri)
	if err != nil {
		return err
	}
	defer g.Close()
	r, _, err := g.Open(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) || errors.Is(err, objstore.ErrNoBucket) {
		return errf(http.StatusBadRequest, "Failed to import data. Not found: %s.", uri)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}

func (s *Server) vtxCreate(w http.ResponseWriter, r *http.Request) error {
	q, err := decode[vtxCreateReq](r, 1<<20, vertexFam)
	if err != nil {
		return err
	}
	uris, outPrefix, err := q.check()
	if err != nil {
		return err
	}
	var seq int64
	s.locked(func() error { seq = s.nextSeq(); return nil })
	id := strconv.FormatUint(1e18+h64(s.opts.Seed, "vtxjob", "", int(seq))%8e18, 10)
	if err := s.vtxImport(r.Context(), uris, s.batchInput(id)); err != nil {
		os.Remove(s.batchInput(id))
		return err
	}
	sc, err := s.scanVertex(s.batchInput(id))
	if err != nil {
		os.Remove(s.batchInput(id))
		return err
	}
	return s.ticked(func(now time.Time) error {
		md := map[string]string{vtxOutPrefix: outPrefix, vtxInURIs: strings.Join(uris, "\n"), vtxModel: q.Model}
		for k, v := range q.Labels {
			md[vtxLabel+k] = v
		}
		bt := int64(max(s.opts.BatchTime, s.opts.VertexMinBatchTime))
		b := &batchRec{ID: id, Family: famVertex, Seq: seq, Created: now, Model: vtxModelName(q.Model),
			InputFileID: uris[0], Account: vtxParent(r), DisplayName: q.DisplayName, Metadata: md,
			JobKey: jobKeyFromFilename(q.DisplayName), N: sc.n, Tokens: sc.tokens, ScanErrors: sc.errs,
			FailInjected: s.fated("vfail", id, 0, s.opts.ValidationFailRate),
			ExpireFate:   s.fated("expire", id, 0, s.opts.ExpireRate),
			Status:       stValidating, BatchTimeNs: &bt}
		s.register(w, b, http.StatusOK, func() any { return s.vtxJobJSON(b, now) })
		return nil
	})
}

// scanVertex checks a job's input ({"request": {...}} lines) and counts
// its requests and estimated tokens; a line that is not such an object
// fails the job when it leaves PENDING, as the service's import does.
func (s *Server) scanVertex(path string) (scanResult, error) {
	const prefix = "Failed to import data: "
	return scanRequests(path, false, prefix, prefix+"the input is empty")
}

// vtxState is the JobState of a job.
func vtxState(b *batchRec) string {
	switch b.Status {
	case stValidating:
		return "JOB_STATE_PENDING"
	case stInProgress, stFinalizing:
		return "JOB_STATE_RUNNING"
	case stCancelling:
		return "JOB_STATE_CANCELLING"
	case stCompleted:
		return "JOB_STATE_SUCCEEDED"
	case stFailed:
		return "JOB_STATE_FAILED"
	case stExpired:
		return "JOB_STATE_EXPIRED"
	case stCancelled:
		return "JOB_STATE_CANCELLED"
	}
	return "JOB_STATE_UNSPECIFIED"
}

func (b *batchRec) vtxName() string { return b.Account + "/batchPredictionJobs/" + b.ID }

// vtxJobJSON renders a job as a BatchPredictionJob.
func (s *Server) vtxJobJSON(b *batchRec, now time.Time) map[string]any {
	md := b.Metadata
	updated := b.Created
	j := map[string]any{"name": b.vtxName(), "displayName": b.DisplayName, "model": md[vtxModel],
		"inputConfig": map[string]any{"instancesFormat": "jsonl",
			"gcsSource": map[string]any{"uris": strings.Split(md[vtxInURIs], "\n")}},
		"outputConfig": map[string]any{"predictionsFormat": "jsonl",
			"gcsDestination": map[string]any{"outputUriPrefix": md[vtxOutPrefix]}},
		"state": vtxState(b), "createTime": gemTime(b.Created)}
	labels := map[string]string{}
	for k, v := range md {
		if l, ok := strings.CutPrefix(k, vtxLabel); ok {
			labels[l] = v
		}
	}
	if len(labels) > 0 {
		j["labels"] = labels
	}
	if b.InProgressAt != nil {
		j["startTime"] = gemTime(*b.InProgressAt)
		updated = *b.InProgressAt
	}
	stats := func(ok, failed, incomplete int) {
		j["completionStats"] = map[string]any{"successfulCount": strconv.Itoa(ok),
			"failedCount": strconv.Itoa(failed), "incompleteCount": strconv.Itoa(incomplete)}
	}
	switch {
	case b.Status == stInProgress || b.Status == stFinalizing || b.Status == stCancelling:
		ok, failed := s.liveCounts(b, now)
		stats(ok, failed, -1)
	case terminal(b.Status) && b.Status != stFailed:
		stats(b.Counts.Succeeded, b.Counts.Errored, b.Counts.Expired+b.Counts.Cancelled)
	}
	if t := b.endedAt(); t != nil {
		j["endTime"] = gemTime(*t)
		updated = *t
	}
	j["updateTime"] = gemTime(updated)
	if b.OutputFileID != "" {
		j["outputInfo"] = map[string]any{"gcsOutputDirectory": b.OutputFileID}
	}
	switch {
	case b.Status == stFailed && len(b.Errors) > 0:
		j["error"] = gemStatusOf(b.Errors)
	case b.Status == stCancelled:
		j["error"] = map[string]any{"code": gemGRPCCode["CANCELLED"], "message": "CANCELED"}
	}
	return j
}

// vtxJob runs fn on job id of the request's project and location, with
// s.mu held and every batch advanced to now (withBatch, with the job's
// project and location in its lookup and its noBatch).
func (s *Server) vtxJob(r *http.Request, id string, fn func(b *batchRec, now time.Time) error) error {
	return s.ticked(func(now time.Time) error {
		b := s.batches[id]
		if b == nil || b.Family != famVertex || b.Account != vtxParent(r) {
			return vertexFam.noBatch(vtxParent(r) + "/batchPredictionJobs/" + id)
		}
		return fn(b, now)
	})
}

func (s *Server) vtxGet(w http.ResponseWriter, r *http.Request) error {
	return s.vtxJob(r, r.PathValue("id"), func(b *batchRec, now time.Time) error {
		writeJSON(w, http.StatusOK, s.vtxJobJSON(b, now))
		return nil
	})
}

// vtxCancel serves POST …/batchPredictionJobs/{id}:cancel: the job ends
// CANCELLED at once (the requests already run keep their predictions); a
// job that has ended answers 400 FAILED_PRECONDITION.
func (s *Server) vtxCancel(w http.ResponseWriter, r *http.Request) error {
	id, action, _ := strings.Cut(r.PathValue("id"), ":")
	if action != "cancel" {
		return errf(http.StatusNotFound, "Unknown method %q of BatchPredictionJob.", action)
	}
	return s.vtxJob(r, id, func(b *batchRec, now time.Time) error {
		if !s.cancel(b, now) {
			return vtxPrecondition("The BatchPredictionJob %s is in state %s and cannot be cancelled.", b.vtxName(), vtxState(b))
		}
		s.apply(b, evCancelled, now)
		writeJSON(w, http.StatusOK, map[string]any{})
		return nil
	})
}

// vtxDelete deletes an ended job (its predictions stay in Cloud Storage)
// and answers a done long-running Operation.
func (s *Server) vtxDelete(w http.ResponseWriter, r *http.Request) error {
	return s.vtxJob(r, r.PathValue("id"), func(b *batchRec, now time.Time) error {
		if !terminal(b.Status) {
			return vtxPrecondition("The BatchPredictionJob %s can only be deleted once it has finished.", b.vtxName())
		}
		delete(s.batches, b.ID)
		s.deleteBatchFiles(b.ID)
		writeJSON(w, http.StatusOK, map[string]any{"name": b.Account + "/operations/" + hexID(s.opts.Seed, "vtxop", b.ID, 0, 19), "done": true,
			"response": map[string]any{"@type": "type.googleapis.com/google.protobuf.Empty"}})
		return nil
	})
}

// vtxList serves the listing, newest first, paged with pageSize (default
// 100) and pageToken; filter takes display_name="…" (the only filter
// emulated; others are refused).
func (s *Server) vtxList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	size := 100
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errf(http.StatusBadRequest, "Invalid page_size %q.", v)
		}
		if n > 0 {
			size = min(n, 1000)
		}
	}
	name, err := vtxFilter(q.Get("filter"))
	if err != nil {
		return err
	}
	return s.ticked(func(now time.Time) error {
		var all []*batchRec
		for _, b := range s.sortedBatches(famVertex) {
			if b.Account == vtxParent(r) && (name == "" || b.DisplayName == name) {
				all = append(all, b)
			}
		}
		page, next := gemPaginate(all, q.Get("pageToken"), size, func(b *batchRec) string { return b.ID })
		jobs := make([]any, len(page))
		for i, b := range page {
			jobs[i] = s.vtxJobJSON(b, now)
		}
		out := map[string]any{"batchPredictionJobs": jobs}
		if next != "" {
			out["nextPageToken"] = next
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// vtxFilter reads a listing filter: "" or display_name="NAME".
func vtxFilter(f string) (string, error) {
	if f = strings.TrimSpace(f); f == "" {
		return "", nil
	}
	for _, field := range []string{"display_name", "displayName"} {
		if v, ok := strings.CutPrefix(f, field+"="); ok {
			if n, err := strconv.Unquote(strings.TrimSpace(v)); err == nil {
				return n, nil
			}
		}
	}
	return "", errf(http.StatusBadRequest, "Unsupported filter %q: the emulator takes display_name=\"NAME\".", f)
}

// runVertexLine produces the output line of input line i: the input's
// fields echoed (all but "request"), the request, processed_time, and
// "status":"" with the response, or a status naming the error. Lines not
// run (expired, cancelled) get no output line.
func (s *Server) runVertexLine(b *batchRec, i int, line []byte, done bool, undone string) lineResult {
	var ln map[string]json.RawMessage
	json.Unmarshal(line, &ln)
	var key string
	json.Unmarshal(ln["key"], &key)
	if !done {
		return notRun(key, undone)
	}
	r := lineResult{customID: key, dest: destOut, kind: outErrored}
	ln["processed_time"] = mustJSON(s.now().UTC().Format("2006-01-02T15:04:05.000-07:00"))
	errLine := func(status int, msg string) []byte {
		ln["status"] = mustJSON(vtxStatus(status, msg))
		return mustJSON(ln)
	}
	f := s.lineFate(b, i)
	if e, ok := injectedErr(&vertexLineErrs, f); ok {
		r.data = errLine(e.status, e.msg)
		return r
	}
	m, _ := s.runGemini(b.Model, ln["request"])
	r.in, r.out = m.in, m.out
	switch {
	case f == fateOmit:
		r.kind, r.dest = outOmitted, destNone
	case m.status == 200:
		ln["status"], ln["response"] = json.RawMessage(`""`), m.body
		r.kind, r.data = outSucceeded, mustJSON(ln)
	default:
		var st struct{ Message string }
		json.Unmarshal(m.body, &st)
		r.data = errLine(m.status, st.Message)
	}
	return r
}

// vertexLineErrs are the line errors the emulator injects into Vertex AI's
// predictions (see injectedErr).
var vertexLineErrs = [3]injected{
	{status: 429, msg: "Resource exhausted. (injected by the emulator's LineErrorRate)"},
	{status: 500, msg: "Internal error encountered. (injected by the emulator's LineErrorRate)"},
	{status: 400, msg: "Request contains an invalid argument. (permanent error injected by the emulator's LineErrorRate)"},
}

// vtxStatus is the status of a failed prediction line: the HTTP reason and
// Google's error JSON, "Bad Request: {\"error\": {…}}".
func vtxStatus(status int, msg string) string {
	e, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": msg, "status": gemStatusName[status]}})
	return http.StatusText(status) + ": " + string(e)
}

// commitVertexOutput writes a job's predictions to Cloud Storage:
// {outputUriPrefix}/prediction-model-{time}/predictions.jsonl, the
// directory given as outputInfo.gcsOutputDirectory. A job with no line
// run has none.
func (s *Server) commitVertexOutput(b *batchRec, rf *resultFile, t time.Time) error {
	if rf.err != nil {
		return rf.err
	}
	if rf.lines == 0 {
		rf.discard()
		return nil
	}
	local := s.batchResults(b.ID)
	if err := rf.commit(local); err != nil {
		return err
	}
	dir := strings.TrimRight(b.Metadata[vtxOutPrefix], "/") + "/prediction-model-" + t.UTC().Format("2006-01-02T15:04:05.000000Z")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, key, err := s.vtxGCS(ctx, dir+"/predictions.jsonl")
	if err != nil {
		return err
	}
	defer g.Close()
	if b.OutputLost {
		b.OutputFileID = dir // the directory is named; its predictions never appear
		return nil
	}
	if err := g.PutFile(ctx, key, local); err != nil {
		return err
	}
	b.OutputFileID = dir
	return nil
}
