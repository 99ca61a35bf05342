package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// fileRec is an OpenAI File; its bytes live in files/<id>.data.
type fileRec struct {
	ID        string `json:"id"`
	Seq       int64  `json:"seq"`
	Bytes     int64  `json:"bytes"`
	Lines     int64  `json:"lines"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt *int64 `json:"expires_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	// Lost: the content answers 404 (OutputFile404Rate).
	Lost bool `json:"lost,omitempty"`
	// Gemini files: Family "gemini" (OpenAI files leave it empty), the
	// display name in Filename, and these.
	Family   string    `json:"family,omitempty"`
	MimeType string    `json:"mime_type,omitempty"`
	SHA256   string    `json:"sha256,omitempty"` // base64
	Source   string    `json:"source,omitempty"` // UPLOADED or GENERATED
	Created  time.Time `json:"created,omitempty"`
	// Result: a batch's output or error file (downloads may be cut), of
	// batch BatchID.
	Result  bool   `json:"result,omitempty"`
	BatchID string `json:"batch_id,omitempty"`
	// SampleType is Mistral's sample_type.
	SampleType string `json:"sample_type,omitempty"`
	// Pending: a Together file announced by POST /files whose bytes were
	// not PUT yet; Signed: it has a signed upload URL; Processed: usable
	// for batches (Together).
	Pending   bool `json:"pending,omitempty"`
	Signed    bool `json:"signed,omitempty"`
	Processed bool `json:"processed,omitempty"`
}

// fileFamily is the family that owns f.
func fileFamily(f *fileRec) string {
	if f.Family == "" {
		return famOpenAI
	}
	return f.Family
}

// batchError is one entry of an OpenAI batch's errors.data.
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// Internal statuses, shared by all families and mapped when rendered.
const (
	stValidating = "validating"
	stInProgress = "in_progress"
	stFinalizing = "finalizing"
	stCompleted  = "completed"
	stFailed     = "failed"
	stExpired    = "expired"
	stCancelling = "cancelling"
	stCancelled  = "cancelled"
)

func terminal(status string) bool {
	switch status {
	case stCompleted, stFailed, stExpired, stCancelled:
		return true
	}
	return false
}

// lineCounts are the final per-line outcomes of a batch.
type lineCounts struct {
	Succeeded int `json:"succeeded"` // includes omitted lines
	Errored   int `json:"errored"`
	Expired   int `json:"expired"`
	Cancelled int `json:"cancelled"`
	Omitted   int `json:"omitted"`
}

// batchRec is one batch of any family. Its input requests are spooled, one
// JSON value per line, in batches/<id>.input.jsonl.
type batchRec struct {
	ID               string            `json:"id"`
	Family           string            `json:"family"`
	Seq              int64             `json:"seq"`
	Created          time.Time         `json:"created"`
	Endpoint         string            `json:"endpoint,omitempty"`
	Model            string            `json:"model,omitempty"`
	InputFileID      string            `json:"input_file_id,omitempty"`
	CompletionWindow string            `json:"completion_window,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	OutputExpiresSec int64             `json:"output_expires_sec,omitempty"`
	// WindowSec is how long the batch may run before it expires (0: the
	// family's window; Mistral's timeout_hours).
	WindowSec    int64        `json:"window_sec,omitempty"`
	InputFiles   []string     `json:"input_files,omitempty"` // Mistral
	Account      string       `json:"account,omitempty"`
	DisplayName  string       `json:"display_name,omitempty"` // Gemini
	Inline       bool         `json:"inline,omitempty"`       // Gemini inlined requests
	JobKey       string       `json:"job_key"`
	N            int          `json:"n"`
	Tokens       int64        `json:"tokens"`
	ScanErrors   []batchError `json:"scan_errors,omitempty"`
	FailInjected bool         `json:"fail_injected,omitempty"`
	ExpireFate   bool         `json:"expire_fate,omitempty"`
	// Stuck is the phase the batch never leaves (StuckRate), or "".
	Stuck string `json:"stuck,omitempty"`
	// OutputLost: its output answers 404 (OutputFile404Rate).
	OutputLost bool `json:"output_lost,omitempty"`

	Status       string       `json:"status"`
	InProgressAt *time.Time   `json:"in_progress_at,omitempty"`
	FinalizingAt *time.Time   `json:"finalizing_at,omitempty"`
	CompletedAt  *time.Time   `json:"completed_at,omitempty"`
	FailedAt     *time.Time   `json:"failed_at,omitempty"`
	ExpiredAt    *time.Time   `json:"expired_at,omitempty"`
	CancellingAt *time.Time   `json:"cancelling_at,omitempty"`
	CancelledAt  *time.Time   `json:"cancelled_at,omitempty"`
	Errors       []batchError `json:"errors,omitempty"`
	DoneFraction float64      `json:"done_fraction"`
	OutputFileID string       `json:"output_file_id,omitempty"`
	ErrorFileID  string       `json:"error_file_id,omitempty"`
	Counts       lineCounts   `json:"counts"`
	InputTokens  int64        `json:"input_tokens"`
	OutputTokens int64        `json:"output_tokens"`
	// BatchTimeNs is Options.BatchTime when the batch was made: its
	// lifecycle keeps it, so an emulator restarted on the same DataDir
	// with another BatchTime (--local-batch-time on a resumed run) changes
	// only the batches made after. Nil in records of older emulators: the
	// current BatchTime.
	BatchTimeNs *int64 `json:"batch_time_ns,omitempty"`
}

// window is how long b may run before it expires.
func (b *batchRec) window() time.Duration { return windowOf(b) }

// endedAt is when a batch reached a terminal status.
func (b *batchRec) endedAt() *time.Time {
	for _, t := range []*time.Time{b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt} {
		if t != nil {
			return t
		}
	}
	return nil
}

// persistedState is state.json.
type persistedState struct {
	IDSeq int64 `json:"id_seq"`
	Stats Stats `json:"stats"`
}

func (s *Server) filePath(id string) string { return filepath.Join(s.dir, "files", id+".data") }
func (s *Server) batchInput(id string) string {
	return filepath.Join(s.dir, "batches", id+".input.jsonl")
}
func (s *Server) batchResults(id string) string {
	return filepath.Join(s.dir, "batches", id+".results.jsonl")
}

func (s *Server) initDirs() error {
	for _, d := range []string{"files", "batches", "tmp", "uploads"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return err
		}
	}
	// Leftover uploads of a previous run are garbage.
	ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, e := range ents {
		os.Remove(filepath.Join(s.dir, "tmp", e.Name()))
	}
	return nil
}

// load reads a DataDir written by an earlier Server.
func (s *Server) load() error {
	if b, err := os.ReadFile(filepath.Join(s.dir, "state.json")); err == nil {
		var st persistedState
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("emulator: state.json: %w", err)
		}
		s.idSeq = st.IDSeq
		s.stats = st.Stats
		s.stats.InFlight = 0 // calls of the server that saved them
	}
	if err := loadRecords(filepath.Join(s.dir, "files"), func(f *fileRec) { s.files[f.ID] = f }); err != nil {
		return err
	}
	if err := loadRecords(filepath.Join(s.dir, "batches"), func(b *batchRec) {
		s.batches[b.ID] = b
		if !terminal(b.Status) {
			s.active[b.ID] = b
		}
	}); err != nil {
		return err
	}
	return loadRecords(filepath.Join(s.dir, "uploads"), func(u *gemUploadRec) { s.uploads[u.ID] = u })
}

// loadRecords reads each record (NAME.json, not hidden) of dir and hands
// it to add.
func loadRecords[T any](dir string, add func(*T)) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		v := new(T)
		if err := readJSON(filepath.Join(dir, e.Name()), v); err != nil {
			return err
		}
		add(v)
	}
	return nil
}

func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("emulator: %s: %w", path, err)
	}
	return nil
}

// saveFile persists a file's metadata (DataDir only). Caller holds s.mu.
func (s *Server) saveFile(f *fileRec) {
	if !s.persist {
		return
	}
	if err := writeJSONAtomic(filepath.Join(s.dir, "files", f.ID+".json"), f); err != nil {
		s.logf("emulator: saving file %s: %v", f.ID, err)
	}
}

// saveBatch persists a batch's metadata (DataDir only). Caller holds s.mu.
func (s *Server) saveBatch(b *batchRec) {
	if b.BatchTimeNs == nil { // a new batch: every create saves it
		bt := int64(s.opts.BatchTime)
		b.BatchTimeNs = &bt
	}
	if !s.persist {
		return
	}
	if err := writeJSONAtomic(filepath.Join(s.dir, "batches", b.ID+".json"), b); err != nil {
		s.logf("emulator: saving batch %s: %v", b.ID, err)
	}
}

// saveState persists the id counter and the counters (DataDir only).
// Caller holds s.mu.
func (s *Server) saveState() {
	if !s.persist {
		return
	}
	if err := s.processed.flush(); err != nil {
		s.logf("emulator: saving processed set: %v", err)
	}
	st := persistedState{IDSeq: s.idSeq, Stats: s.Stats()}
	if err := writeJSONAtomic(filepath.Join(s.dir, "state.json"), st); err != nil {
		s.logf("emulator: saving state: %v", err)
	}
}

// deleteBatch removes an ended batch and its files. Caller holds s.mu.
func (s *Server) deleteBatch(b *batchRec) {
	delete(s.batches, b.ID)
	s.deleteBatchFiles(b.ID)
}

// deleteBatchFiles removes a batch's metadata, spooled input and results.
func (s *Server) deleteBatchFiles(id string) {
	os.Remove(filepath.Join(s.dir, "batches", id+".json"))
	os.Remove(s.batchInput(id))
	os.Remove(s.batchResults(id))
}

// linkOrCopy makes dst a snapshot of src (hard link, else copy), so that
// deleting an input file does not break a running batch.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}
