package emulator

// The emulator core: what every family's handlers are built from. A new
// family (emulator/<family>.go) needs these and nothing else of the others.
//
//   - apiError (errf to make one) is an error a handler returns: an HTTP
//     status and a message, plus the fields some envelopes carry (Type,
//     Code, Param; Num for Cloudflare's numeric codes; Loc for Mistral's
//     422 validation errors). Any other error a handler returns is the
//     emulator's own failure: 500.
//   - family is one API family's error mapping: write renders an apiError
//     in the family's envelope (the status picks the type or code the
//     caller left empty), badBody names a body that does not parse, and
//     noBatch a batch id the family does not know. openaiFam, anthropicFam,
//     cloudflareFam, geminiFam, mistralFam, togetherFam, xaiFam and
//     vertexFam are the values;
//     familyByName finds one (the middleware's injected faults, the 404 of
//     an unknown route).
//   - fam.h(handler) adapts a handler `func(w, r) error` to http: a
//     returned error is written by fam.fail (its envelope, 500 for a plain
//     error). Handlers return errors only before writing their answer.
//   - decode[T](r, limit, fam) reads a body of at most limit bytes into a T,
//     or returns fam.badBody of why it could not; parse[T](body, fam) is
//     the same for a body already read.
//   - s.locked(fn) runs fn with s.mu held (released by defer);
//     s.ticked(fn) does the same after advancing every batch to now;
//     s.withBatch(fam, id, fn) adds the lookup of a batch of fam (its
//     noBatch error when absent), so a handler never unlocks by hand;
//     s.getBatch(fam, key, render) is a whole GET of one batch.
//   - s.familyFiles(fam, keep) and s.sortedBatches(fam) list a family's
//     files and batches, newest first; s.openContent and s.serveOpened
//     answer a file's bytes (opened under s.mu, sent after).
//   - Creating: s.spoolFile(fileID, check, newID) snapshots an input file
//     into a new batch's spool (lock, tick, file check, link; unlock by
//     defer); s.register(w, b, status, render) adds the batch (addBatch:
//     fates, persistence, counters), answers it and forgets it when fated;
//     s.newFile(w, u, mk, render) stores an upload (readUpload) as a file.
//
// A new family is a family value, s.<family>Routes(mux) called from
// routes() (server.go), and its name in familyByName, familyOf and
// Families (util.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// apiError is an error answered to the client in its family's envelope.
type apiError struct {
	Status int
	Msg    string
	Type   string   // the envelope's type (OpenAI, Anthropic, Mistral) or status name (Gemini); "": from Status
	Code   string   // OpenAI's code
	Param  string   // OpenAI's param
	Num    int      // Cloudflare's numeric code; 0: from Status
	Loc    []string // Mistral 422: the location under "body"
}

func (e *apiError) Error() string { return e.Msg }

// errf is an apiError with a status and a formatted message.
func errf(status int, format string, args ...any) *apiError {
	if len(args) > 0 {
		format = fmt.Sprintf(format, args...)
	}
	return &apiError{Status: status, Msg: format}
}

// family is one API family's error mapping.
type family struct {
	name string
	// write renders e in the family's envelope.
	write func(w http.ResponseWriter, e *apiError)
	// badBody is the answer to a request body that does not parse.
	badBody func(err error) *apiError
	// noBatch is the answer to an unknown batch id.
	noBatch func(id string) *apiError
	// internal is the answer to the emulator's own failure (nil: 500 with
	// the error's text).
	internal func(err error) *apiError
}

// fail writes err in the family's envelope: an apiError as it is, any
// other error as the emulator's failure.
func (f *family) fail(w http.ResponseWriter, err error) {
	var e *apiError
	switch {
	case errors.As(err, &e):
	case f.internal != nil:
		e = f.internal(err)
	default:
		e = &apiError{Status: http.StatusInternalServerError, Msg: err.Error()}
	}
	f.write(w, e)
}

// h adapts a handler that returns its error to an http.HandlerFunc.
func (f *family) h(fn func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			f.fail(w, err)
		}
	}
}

// decode reads r's body (at most limit bytes) as JSON into a T.
func decode[T any](r *http.Request, limit int64, f *family) (T, error) {
	body, err := readLimited(r, limit)
	if err != nil {
		var v T
		return v, f.badBody(err)
	}
	return parse[T](body, f)
}

// decodeChecked is decode, then the body's own check of what it holds.
func decodeChecked[T any, PT interface {
	*T
	check() error
}](r *http.Request, limit int64, f *family) (T, error) {
	v, err := decode[T](r, limit, f)
	if err == nil {
		err = PT(&v).check()
	}
	return v, err
}

// parse reads body as JSON into a T.
func parse[T any](body []byte, f *family) (T, error) {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return v, f.badBody(err)
	}
	return v, nil
}

// locked runs fn with s.mu held.
func (s *Server) locked(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn()
}

// ticked runs fn with s.mu held, every batch advanced to now.
func (s *Server) ticked(fn func(now time.Time) error) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick(now)
	return fn(now)
}

// withBatch runs fn on batch id of family f, with s.mu held and every
// batch advanced to now; an unknown id is f.noBatch.
func (s *Server) withBatch(f *family, id string, fn func(b *batchRec, now time.Time) error) error {
	return s.ticked(func(now time.Time) error {
		b := s.batches[id]
		if b == nil || b.Family != f.name {
			return f.noBatch(id)
		}
		return fn(b, now)
	})
}

// getBatch serves GET of one batch of family f, named by path value key,
// as render has it.
func (s *Server) getBatch(f *family, key string, render func(b *batchRec, r *http.Request, now time.Time) any) http.HandlerFunc {
	return f.h(func(w http.ResponseWriter, r *http.Request) error {
		return s.withBatch(f, r.PathValue(key), func(b *batchRec, now time.Time) error {
			writeJSON(w, http.StatusOK, render(b, r, now))
			return nil
		})
	})
}

// familyFiles lists the files of family fam that keep accepts (nil: all),
// newest first. Caller holds s.mu.
func (s *Server) familyFiles(fam string, keep func(f *fileRec) bool) []*fileRec {
	var all []*fileRec
	for _, f := range s.files {
		if fileFamily(f) == fam && (keep == nil || keep(f)) {
			all = append(all, f)
		}
	}
	slices.SortFunc(all, func(a, b *fileRec) int { return int(b.Seq - a.Seq) })
	return all
}

// familyByName is the error mapping of a family (OpenAI's for a name it
// does not know).
func familyByName(name string) *family {
	for _, f := range []*family{anthropicFam, cloudflareFam, geminiFam, mistralFam, togetherFam, xaiFam, vertexFam, bedrockFam} {
		if f.name == name {
			return f
		}
	}
	return openaiFam
}

// familyError writes a generic error in the envelope of family fam (see
// errorFamily).
func familyError(w http.ResponseWriter, fam string, status int, msg string) {
	familyByName(fam).write(w, &apiError{Status: status, Msg: msg})
}

var openaiFam = &family{
	name: famOpenAI,
	write: func(w http.ResponseWriter, e *apiError) {
		typ, code := e.Type, e.Code
		if typ == "" {
			switch {
			case e.Status == http.StatusTooManyRequests:
				typ = "requests"
				if code == "" {
					code = "rate_limit_exceeded"
				}
			case e.Status >= 500:
				typ = "server_error"
			default:
				typ = "invalid_request_error"
			}
		}
		oaiError(w, e.Status, typ, e.Msg, e.Param, code)
	},
	badBody: func(err error) *apiError {
		return errf(http.StatusBadRequest, "We could not parse the JSON body of your request: "+err.Error())
	},
	noBatch: func(id string) *apiError {
		return &apiError{Status: http.StatusNotFound, Msg: "No batch found with id '" + id + "'.", Param: "batch_id"}
	},
}

var anthropicFam = &family{
	name: famAnthropic,
	write: func(w http.ResponseWriter, e *apiError) {
		typ := e.Type
		if typ == "" {
			typ = map[int]string{400: "invalid_request_error", 401: "authentication_error",
				404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
				429: "rate_limit_error", 529: "overloaded_error"}[e.Status]
		}
		if typ == "" {
			typ = "api_error"
		}
		antError(w, e.Status, typ, e.Msg)
	},
	badBody: func(err error) *apiError {
		return errf(http.StatusBadRequest, "invalid request body: "+err.Error())
	},
	noBatch: func(id string) *apiError { return errf(http.StatusNotFound, "Message batch "+id+" not found.") },
}

var cloudflareFam = &family{
	name: famCloudflare,
	write: func(w http.ResponseWriter, e *apiError) {
		code := e.Num
		if code == 0 {
			code = map[int]int{400: 5004, 401: 10000, 404: 7003, 405: 7001, 413: 3006, 429: 3040}[e.Status]
		}
		if code == 0 {
			code = 7000 + e.Status%100
		}
		cfError(w, e.Status, code, e.Msg)
	},
	badBody: func(error) *apiError {
		return errf(http.StatusBadRequest, "Invalid data: the body must be a JSON object.")
	},
	noBatch: func(id string) *apiError { return errf(http.StatusBadRequest, "Invalid data: unknown request_id "+id) },
	internal: func(err error) *apiError {
		return &apiError{Status: http.StatusInternalServerError, Num: 7500, Msg: err.Error()}
	},
}

var geminiFam = &family{
	name:  famGemini,
	write: func(w http.ResponseWriter, e *apiError) { gemErrorStatus(w, e.Status, e.Type, e.Msg) },
	badBody: func(err error) *apiError {
		return errf(http.StatusBadRequest, "Invalid JSON payload received. "+err.Error())
	},
	noBatch: func(id string) *apiError { return errf(http.StatusNotFound, "Batch batches/"+id+" not found.") },
}

var mistralFam = &family{
	name: famMistral,
	write: func(w http.ResponseWriter, e *apiError) {
		if e.Status == http.StatusUnprocessableEntity {
			mistral422(w, e.Loc, e.Msg, e.Type)
			return
		}
		typ := e.Type
		switch {
		case typ != "":
		case e.Status == 401:
			typ = "unauthorized"
		case e.Status == 429:
			typ = "rate_limited"
		case e.Status >= 500:
			typ = "internal_server_error"
		default:
			typ = "invalid_request_error"
		}
		mistralError(w, e.Status, typ, e.Msg)
	},
	badBody: func(err error) *apiError {
		return mistralInvalid(nil, "JSON decode error: "+err.Error(), "json_invalid")
	},
	noBatch: func(id string) *apiError { return mistralNotFound("Batch job", id) },
}

var togetherFam = &family{
	name:    famTogether,
	write:   func(w http.ResponseWriter, e *apiError) { togetherError(w, e.Status, e.Msg) },
	badBody: func(err error) *apiError { return errf(http.StatusBadRequest, "Invalid JSON body: "+err.Error()) },
	noBatch: func(id string) *apiError { return errf(http.StatusNotFound, "Batch job "+id+" not found") },
}

var xaiFam = &family{
	name:    famXAI,
	write:   func(w http.ResponseWriter, e *apiError) { xaiError(w, e.Status, e.Msg) },
	badBody: func(err error) *apiError { return errf(http.StatusBadRequest, "Invalid JSON body: "+err.Error()) },
	noBatch: func(id string) *apiError { return errf(http.StatusNotFound, "Batch "+id+" not found") },
}

// vertexFam answers in Google's envelope, as Gemini does; noBatch takes
// the job's resource name (projects/…/locations/…/batchPredictionJobs/ID:
// vtxJob).
var vertexFam = &family{
	name:    famVertex,
	write:   geminiFam.write,
	badBody: geminiFam.badBody,
	noBatch: func(name string) *apiError {
		return errf(http.StatusNotFound, "The BatchPredictionJob "+name+" does not exist.")
	},
}

// bedrockFam answers in AWS's JSON error shape (bedrockFault, bedrock.go).
var bedrockFam = &family{
	name:    famBedrock,
	write:   func(w http.ResponseWriter, e *apiError) { bedrockFault(w, e.Status, e.Msg) },
	badBody: func(err error) *apiError { return errf(http.StatusBadRequest, "Malformed input request: "+err.Error()) },
	noBatch: func(id string) *apiError { return errf(http.StatusNotFound, "Could not find job "+id) },
}
