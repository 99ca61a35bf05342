package emulator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Destinations of a result line.
const (
	destNone = iota
	destOut
	destErr
)

type outcome uint8

const (
	outSucceeded outcome = iota
	outErrored
	outOmitted
	outExpired
	outCancelled
)

// lineResult is what one input line turned into.
type lineResult struct {
	data     []byte // one JSON value, no newline
	dest     int
	kind     outcome
	customID string // for duplicate counting; "" = not tracked
	in, out  int64  // tokens
}

// unrun is the outcome of a line its batch never ran (undone, the state
// the batch ended in: stCancelled or stExpired): cancelled with a
// cancelled batch, else expired.
func unrun(undone string) outcome {
	if undone == stCancelled {
		return outCancelled
	}
	return outExpired
}

func (r lineResult) executed() bool { return r.kind != outExpired && r.kind != outCancelled }

// hostileCounts are what the hostile knobs did to one batch's results.
type hostileCounts struct {
	succeeded                            int64 // successes delivered intact
	malformed, duplicated, unknown, lost int64
}

type span struct {
	off  int64
	n    int32
	dest uint8
}

// finalize runs the done lines of b (the first done*N lines of its processing
// order), turns the others into expired/cancelled results, and writes the
// result files in processing order. Caller holds s.mu.
//
// Its rules have one home each: finalizer.place (where a result line goes
// and what the hostile knobs do to it), finalizer.count (what it counts
// for), writeInOrder (processing order), commitResults (the family's result
// files) and noteFinalized (the counters).
func (s *Server) finalize(b *batchRec, done float64, undone string, t time.Time) error {
	n := b.N
	order := s.perm(b)
	isDone := make([]bool, n)
	for _, i := range order[:doneCount(done, n)] {
		isDone[i] = true
	}
	in, err := os.Open(s.batchInput(b.ID))
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "results-*")
	if err != nil {
		return err
	}
	defer func() { tmp.Close(); os.Remove(tmp.Name()) }()

	created := t.Unix()
	if b.InProgressAt != nil {
		created = b.InProgressAt.Unix()
	}
	fz := &finalizer{s: s, b: b, tw: bufio.NewWriterSize(tmp, 1<<20), spans: make([]span, n), extras: map[int][]span{}}
	i := 0
	err = eachLine(in, func(t []byte, _ int) bool {
		if i >= n {
			return false
		}
		r := s.runLine(b, i, t, isDone[i], undone, created)
		fz.place(i, r)
		fz.count(r)
		i++
		return i < n
	})
	if err != nil {
		return err
	}
	if err := fz.tw.Flush(); err != nil {
		return err
	}
	outW, errW, err := s.writeInOrder(b, tmp, order, fz.spans, fz.extras)
	if err == nil {
		err = s.commitResults(b, outW, errW, t)
	}
	if err != nil {
		return err
	}
	b.Counts = fz.c
	s.noteFinalized(b, fz)
	return nil
}

// finalizer is the state of one finalize: the result lines spooled to a
// temp file in input order (spans, and the hostile extra lines written
// before line i in extras) and what they count for.
type finalizer struct {
	s      *Server
	b      *batchRec
	tw     *bufio.Writer
	off    int64
	spans  []span
	extras map[int][]span
	c      lineCounts
	// processed: lines executed; dups: executed custom_ids already
	// executed before.
	processed, dups int64
	h               hostileCounts
}

// put spools one line for dest.
func (fz *finalizer) put(data []byte, dest int) span {
	fz.tw.Write(data)
	fz.tw.WriteByte('\n')
	sp := span{off: fz.off, n: int32(len(data) + 1), dest: uint8(dest)}
	fz.off += int64(len(data) + 1)
	return sp
}

// place spools the result line of input line i, as the hostile knobs
// have it: malformed, duplicated (a conflicting copy goes to the error
// file of a files family), followed by a line of an unknown custom_id.
func (fz *finalizer) place(i int, r lineResult) {
	if r.dest == destNone {
		return
	}
	s, b := fz.s, fz.b
	data := r.data
	lf := s.lineFaultsOf(b, i)
	switch {
	case lf.malformed:
		data = s.malform(b, i, data)
		fz.h.malformed++
	case lf.dup && r.kind == outSucceeded:
		dest := r.dest
		if filesFamily(b.Family) {
			dest = destErr
		}
		fz.extras[i] = append(fz.extras[i], fz.put(s.conflicting(b, i, data), dest))
		fz.h.duplicated++
	case lf.dup:
		fz.extras[i] = append(fz.extras[i], fz.put(data, r.dest))
		fz.h.duplicated++
	}
	if lf.ghost {
		fz.extras[i] = append(fz.extras[i], fz.put(s.ghost(b, i, r.data), r.dest))
		fz.h.unknown++
	}
	fz.spans[i] = fz.put(data, r.dest)
	switch {
	case lf.malformed:
	case b.OutputLost && r.dest == destOut:
		fz.h.lost++
	case r.kind == outSucceeded:
		fz.h.succeeded++
	}
}

// count adds a line's outcome to the batch's counts, and an executed
// line's tokens and custom_id to the batch and the processed set.
func (fz *finalizer) count(r lineResult) {
	switch r.kind {
	case outSucceeded:
		fz.c.Succeeded++
	case outOmitted:
		fz.c.Succeeded++
		fz.c.Omitted++
	case outErrored:
		fz.c.Errored++
	case outExpired:
		fz.c.Expired++
	case outCancelled:
		fz.c.Cancelled++
	}
	if !r.executed() {
		return
	}
	b := fz.b
	fz.processed++
	b.InputTokens += r.in
	b.OutputTokens += r.out
	if r.customID != "" && fz.s.processed.mark(b.Family, b.JobKey, r.customID) {
		fz.dups++
	}
}

// writeInOrder copies the spooled lines to the destination files in
// processing order: output and error files for a files family, one
// results file otherwise (errW is outW).
func (s *Server) writeInOrder(b *batchRec, tmp *os.File, order []int32, spans []span, extras map[int][]span) (outW, errW *resultFile, err error) {
	outW = s.newResultFile()
	errW = outW
	if filesFamily(b.Family) {
		errW = s.newResultFile()
	}
	buf := make([]byte, 0, 4096)
	for _, i := range order {
		if spans[i].dest == destNone {
			continue
		}
		for _, sp := range append(extras[int(i)], spans[i]) {
			if cap(buf) < int(sp.n) {
				buf = make([]byte, sp.n)
			}
			buf = buf[:sp.n]
			if _, err := tmp.ReadAt(buf, sp.off); err != nil {
				return nil, nil, err
			}
			w := outW
			if sp.dest == destErr {
				w = errW
			}
			if err := w.write(buf); err != nil {
				return nil, nil, err
			}
		}
	}
	return outW, errW, nil
}

// commitResults makes the result files of b its family's: an output and
// an error File (OpenAI, Mistral, Together), a GENERATED responses file
// (Gemini from a file), or the batch's results (the others, and Gemini's
// inlined requests).
func (s *Server) commitResults(b *batchRec, outW, errW *resultFile, t time.Time) error {
	var err error
	switch {
	case filesFamily(b.Family):
		exp := s.resultExpiry(b, t)
		if b.OutputFileID, err = s.commitOutputFile(b, outW, false, t, exp); err != nil {
			return err
		}
		if f := s.files[b.OutputFileID]; f != nil && b.OutputLost {
			f.Lost = true
			s.saveFile(f)
		}
		b.ErrorFileID, err = s.commitOutputFile(b, errW, true, t, exp)
		return err
	case b.Family == famVertex:
		return s.commitVertexOutput(b, outW, t)
	case b.Family == famGemini && !b.Inline:
		return s.commitGeminiOutput(b, outW, t)
	default:
		return outW.commit(s.batchResults(b.ID))
	}
}

// noteFinalized adds a finalized batch's lines to the counters.
func (s *Server) noteFinalized(b *batchRec, fz *finalizer) {
	c, h, processed, dups := fz.c, fz.h, fz.processed, fz.dups
	s.bump(func(st *Stats) {
		st.RequestsProcessed += processed
		st.RequestsProcessedMoreThanOnce += dups
		fs := st.family(b.Family)
		fs.RequestsProcessed += processed
		fs.RequestsProcessedMoreThanOnce += dups
		st.ByFamily[b.Family] = fs
		st.LinesSucceeded += h.succeeded
		st.LinesMalformed += h.malformed
		st.LinesDuplicated += h.duplicated
		st.LinesUnknown += h.unknown
		st.LinesLost += h.lost
		st.LinesOmitted += int64(c.Omitted)
		st.LinesErrored += int64(c.Errored)
		st.LinesExpired += int64(c.Expired)
		st.LinesCancelled += int64(c.Cancelled)
	})
	if dups > 0 {
		s.logf("emulator: batch %s executed %d custom_ids that were already executed", b.ID, dups)
	}
}

// resultFile is a result file being written in tmp/.
type resultFile struct {
	sync  bool
	f     *os.File
	w     *bufio.Writer
	bytes int64
	lines int64
	err   error
}

func (s *Server) newResultFile() *resultFile {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "out-*")
	if err != nil {
		return &resultFile{err: err}
	}
	return &resultFile{sync: s.persist, f: f, w: bufio.NewWriterSize(f, 256<<10)}
}

func (r *resultFile) write(p []byte) error {
	if r.err != nil {
		return r.err
	}
	_, r.err = r.w.Write(p)
	r.bytes += int64(len(p))
	r.lines++
	return r.err
}

func (r *resultFile) commit(path string) error {
	if r.err != nil {
		return r.err
	}
	err := r.w.Flush()
	if err == nil && r.sync {
		err = r.f.Sync()
	}
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(r.f.Name(), path)
	}
	if err != nil {
		os.Remove(r.f.Name())
	}
	return err
}

func (r *resultFile) discard() {
	if r.f != nil {
		r.f.Close()
		os.Remove(r.f.Name())
	}
}

// commitOutputFile turns a non-empty result file of b into a File of b's
// family (OpenAI: purpose batch_output; Mistral: purpose batch, sample_type
// batch_result or batch_error; Together: purpose batch-api); an empty one
// is dropped and "" returned.
// resultExpiry is when the result files of b, made at t, expire:
// output_expires_after.seconds (else 30 days) later, scaled by
// ResultRetentionScale, in whole seconds (rounded up) after its created_at.
func (s *Server) resultExpiry(b *batchRec, t time.Time) int64 {
	keep := 30 * 24 * time.Hour
	if b.OutputExpiresSec > 0 {
		keep = time.Duration(b.OutputExpiresSec) * time.Second
	}
	if sc := s.opts.ResultRetentionScale; sc > 0 {
		keep = time.Duration(float64(keep) * sc)
	}
	return t.Unix() + int64((keep+time.Second-1)/time.Second)
}

// expired reports whether f is a result file past its expires_at: gone.
func (s *Server) expired(f *fileRec) bool {
	return f.Result && f.ExpiresAt != nil && s.now().Unix() >= *f.ExpiresAt
}

func (s *Server) commitOutputFile(b *batchRec, r *resultFile, errs bool, t time.Time, exp int64) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	if r.lines == 0 {
		r.discard()
		return "", nil
	}
	seq := s.nextSeq()
	f := &fileRec{ID: s.fileID(seq), Seq: seq, Bytes: r.bytes, Lines: r.lines,
		CreatedAt: t.Unix(), ExpiresAt: &exp, Filename: b.ID + "_output.jsonl", Purpose: "batch_output", Result: true,
		BatchID: b.ID}
	if errs {
		f.Filename = b.ID + "_error.jsonl"
	}
	switch b.Family {
	case famMistral:
		f.ID, f.Family, f.Purpose, f.SampleType = s.mistralFileID(seq), famMistral, "batch", "batch_result"
		if errs {
			f.SampleType = "batch_error"
		}
	case famTogether:
		f.ID, f.Family, f.Purpose, f.Processed = s.togetherFileID(seq), famTogether, "batch-api", true
	}
	if err := r.commit(s.filePath(f.ID)); err != nil {
		return "", err
	}
	s.files[f.ID] = f
	s.saveFile(f)
	return f.ID, nil
}

func (s *Server) fileID(seq int64) string {
	return "file-" + b58ID(s.opts.Seed, "file", "", int(seq), 22)
}

// runLine produces the result of line i of b.
func (s *Server) runLine(b *batchRec, i int, line []byte, done bool, undone string, created int64) lineResult {
	switch b.Family {
	case famAnthropic:
		return s.runAnthropicLine(b, i, line, done, undone)
	case famCloudflare:
		return s.runCloudflareLine(b, i, line, done)
	case famMistral, famTogether:
		return s.runBodyLine(b, i, line, done, undone, created)
	case famGemini:
		return s.runGeminiLine(b, i, line, done, undone)
	case famXAI:
		return s.runXAILine(b, i, line, done, undone, created)
	case famVertex:
		return s.runVertexLine(b, i, line, done, undone)
	case famBedrock:
		if !done {
			return lineResult{kind: unrun(undone)}
		}
		return s.runBedrockLine(b, i, line)
	}
	return s.runOpenAILine(b, i, line, done, undone, created)
}

func (s *Server) runOpenAILine(b *batchRec, i int, line []byte, done bool, undone string, created int64) lineResult {
	ln := readOAILine(line)
	r := lineResult{customID: ln.CustomID}
	id := "batch_req_" + hexID(s.opts.Seed, "batchreq", b.ID, i, 16)
	if !done {
		r.dest, r.kind = destErr, unrun(undone)
		code, msg := "batch_expired", "This request could not be executed before the completion window expired."
		if r.kind == outCancelled {
			code, msg = "batch_cancelled", "This request was not executed because the batch was cancelled."
		}
		r.data = mustJSON(map[string]any{"id": id, "custom_id": ln.CustomID, "response": nil,
			"error": map[string]any{"code": code, "message": msg}})
		return r
	}
	var status int
	var body []byte
	f := s.lineFate(b, i)
	e, isInjected := injectedErr(&oaiLineErrs, f)
	switch {
	case isInjected:
		status, body = e.status, oaiErrorBody(e.msg, e.typ, e.code)
	case f == fateOmit:
		m := s.runOpenAI(normEndpoint(b.Endpoint), ln.Body, created)
		r.kind, r.in, r.out = outOmitted, m.in, m.out
		return r
	default:
		m := s.runOpenAI(normEndpoint(b.Endpoint), ln.Body, created)
		status, body, r.in, r.out = m.status, m.body, m.in, m.out
	}
	r.dest, r.kind = destOut, outSucceeded
	if status/100 != 2 {
		r.dest, r.kind = destErr, outErrored
	}
	// Built by hand: this is the hot path of a 50,000-line batch.
	d := make([]byte, 0, len(body)+160)
	d = append(d, `{"id":"`...)
	d = append(d, id...)
	d = append(d, `","custom_id":`...)
	d = append(d, mustJSON(ln.CustomID)...)
	d = append(d, `,"response":{"status_code":`...)
	d = strconv.AppendInt(d, int64(status), 10)
	d = append(d, `,"request_id":"req_`...)
	d = append(d, hexID(s.opts.Seed, "req", b.ID, i, 16)...)
	d = append(d, `","body":`...)
	d = append(d, body...)
	r.data = append(d, `},"error":null}`...)
	return r
}

func oaiErrorBody(msg, typ, code string) []byte {
	return mustJSON(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": nullable(code)}})
}

func (s *Server) runAnthropicLine(b *batchRec, i int, line []byte, done bool, undone string) lineResult {
	var ln struct {
		CustomID string          `json:"custom_id"`
		Params   json.RawMessage `json:"params"`
	}
	json.Unmarshal(line, &ln)
	r := lineResult{customID: ln.CustomID, dest: destOut}
	result := func(v any) []byte { return mustJSON(map[string]any{"custom_id": ln.CustomID, "result": v}) }
	errored := func(typ, msg string) []byte {
		return result(map[string]any{"type": "errored", "error": map[string]any{
			"type": "error", "error": map[string]any{"type": typ, "message": msg},
			"request_id": "req_01" + b58ID(s.opts.Seed, "antreq", b.ID, i, 22)}})
	}
	if !done {
		r.kind, r.data = unrun(undone), result(map[string]any{"type": "expired"})
		if r.kind == outCancelled {
			r.data = result(map[string]any{"type": "canceled"})
		}
		return r
	}
	r.kind = outErrored
	f := s.lineFate(b, i)
	if e, ok := injectedErr(&antLineErrs, f); ok {
		r.data = errored(e.typ, e.msg)
		return r
	}
	m := s.runAnthropic(ln.Params, "batch")
	r.in, r.out = m.in, m.out
	switch {
	case f == fateOmit:
		r.kind, r.dest = outOmitted, destNone
	case m.status == 200:
		d := append([]byte(`{"custom_id":`), mustJSON(ln.CustomID)...)
		d = append(d, `,"result":{"type":"succeeded","message":`...)
		d = append(d, m.body...)
		r.kind, r.data = outSucceeded, append(d, "}}"...)
	default:
		var e struct{ Type, Message string }
		json.Unmarshal(m.body, &e)
		r.data = errored(e.Type, e.Message)
	}
	return r
}

func (s *Server) runCloudflareLine(b *batchRec, i int, item []byte, done bool) lineResult {
	var ref struct {
		Ref json.RawMessage `json:"external_reference"`
	}
	json.Unmarshal(item, &ref)
	r := lineResult{dest: destOut, kind: outErrored}
	var refStr string
	if json.Unmarshal(ref.Ref, &refStr) == nil {
		r.customID = refStr
	}
	entry := func(kv ...any) []byte {
		m := map[string]any{"id": i}
		for k := 0; k+1 < len(kv); k += 2 {
			m[kv[k].(string)] = kv[k+1]
		}
		// Every item carries the key: an item sent without a reference
		// answers "external_reference": null (the docs' example).
		m["external_reference"] = nil
		if len(ref.Ref) > 0 {
			m["external_reference"] = ref.Ref
		}
		return mustJSON(m)
	}
	itemErr := func(code int, msg string) []byte {
		if s.opts.CloudflareItemErrorString {
			return entry("success", false, "error", msg)
		}
		return entry("success", false, "error", map[string]any{"code": code, "message": msg})
	}
	if !done {
		r.kind, r.data = outExpired, itemErr(3007, "Request timed out before it could be processed.")
		return r
	}
	f := s.lineFate(b, i)
	if e, ok := injectedErr(&cfLineErrs, f); ok {
		r.data = itemErr(e.num, e.msg)
		return r
	}
	res, in, out, err := s.runCloudflare(b.Model, item)
	r.in, r.out = in, out
	switch {
	case f == fateOmit:
		r.kind, r.dest = outOmitted, destNone
	case err != nil:
		r.data = itemErr(5004, err.Error())
	default:
		r.kind, r.data = outSucceeded, entry("result", json.RawMessage(res), "success", true)
	}
	return r
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("emulator: marshal: %v", err))
	}
	return b
}

// injected is a family's wording of a line error the emulator injects.
type injected struct {
	status int    // the HTTP status the line reports
	num    int    // Cloudflare's numeric error code
	typ    string // the error type (Gemini: the status name)
	code   string // OpenAI's error code
	msg    string
}

// injectedErr is the family's error (from its fam[0] for fate429, fam[1]
// for fate500, fam[2] for fate400) when f is an error the emulator
// injects (LineErrorRate); ok is false for any other fate.
func injectedErr(fam *[3]injected, f fate) (e injected, ok bool) {
	switch f {
	case fate429, fate500, fate400:
		return fam[f-fate429], true
	}
	return injected{}, false
}

var oaiLineErrs = [3]injected{
	{status: 429, typ: "requests", code: "rate_limit_exceeded", msg: "Rate limit reached for requests (injected by the emulator's LineErrorRate)."},
	{status: 500, typ: "server_error", msg: "The server had an error while processing your request. Sorry about that!"},
	{status: 400, typ: "invalid_request_error", code: "invalid_value", msg: "Invalid request (permanent error injected by the emulator's LineErrorRate)."},
}

var antLineErrs = [3]injected{
	{typ: "rate_limit_error", msg: "Rate limit exceeded (injected by the emulator's LineErrorRate)."},
	{typ: "api_error", msg: "Internal server error (injected by the emulator's LineErrorRate)."},
	{typ: "invalid_request_error", msg: "Invalid request (permanent error injected by the emulator's LineErrorRate)."},
}

var cfLineErrs = [3]injected{
	{num: 3040, msg: "Capacity temporarily exceeded, please try again. (injected by the emulator)"},
	{num: 3043, msg: "Internal server error (injected by the emulator)"},
	{num: 5004, msg: "Invalid data (permanent error injected by the emulator)"},
}

// oaiLine is a line of the OpenAI batch input format (Mistral's and
// Together's too).
type oaiLine struct {
	CustomID string          `json:"custom_id"`
	Body     json.RawMessage `json:"body"`
}

// readOAILine reads line; its fields stay empty where it does not parse.
func readOAILine(line []byte) oaiLine {
	var ln oaiLine
	json.Unmarshal(line, &ln)
	return ln
}
