package sluice

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/sluice-batch/sluice/internal/iobuf"
)

// Fingerprint identifies the content of an input file, so a later run can
// tell whether the file changed under its job.
type Fingerprint struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
	Hash    string    `json:"hash"` // hex digest of the bytes as read (compressed, if the file is)
}

// Job is one input file driven through one provider to one output file.
type Job struct {
	ID          string      `json:"id"`
	Provider    string      `json:"provider"`
	Input       string      `json:"input"` // absolute path
	Fingerprint Fingerprint `json:"fingerprint"`
	Model       string      `json:"model,omitempty"` // job-level model for lines without body.model
	Limits      Limits      `json:"limits"`
	Dir         string      `json:"dir"`    // the job's directory under the state dir
	Output      string      `json:"output"` // where the merged output goes
	State       JobState    `json:"state"`
	Requests    int64       `json:"requests"` // valid requests in the input
	Rejected    int64       `json:"rejected"` // invalid lines skipped (--skip-invalid)
	// Reused counts requests answered at planning from earlier jobs'
	// results (--reuse, docs/money.md): in no chunk, succeeded from the start.
	Reused      int64 `json:"reused,omitempty"`
	MaxAttempts int   `json:"max_attempts"`
	// CancelRequestedAt is when `sluice cancel` cancelled the job; zero if
	// it never was. It stays set as the job goes on to merging and done.
	CancelRequestedAt time.Time `json:"cancel_requested_at,omitzero"`
	// Endpoint is the provider endpoint the job talks to, as resolved
	// (empty for the built-in emulator and for jobs of older versions).
	Endpoint string `json:"endpoint,omitempty"`
	// ModelMap and DefaultMaxTokens are the --model-map (sorted,
	// "old=new,...") and --default-max-tokens the job was planned with;
	// PlanFlagsKnown is false for a job planned before they were recorded.
	ModelMap         string `json:"model_map,omitempty"`
	DefaultMaxTokens int64  `json:"default_max_tokens,omitempty"`
	PlanFlagsKnown   bool   `json:"-"`
	// Bucket is where the job's batches read and write their files at the
	// provider (Vertex's gs://, Bedrock's s3://), as resolved; empty for
	// other providers and for jobs planned before it was recorded.
	Bucket string `json:"bucket,omitempty"`
	// ProviderFiles says where the job's files at the provider stand:
	// ProviderFilesLive, ProviderFilesDeleted or ProviderFilesKept.
	ProviderFiles string `json:"provider_files,omitempty"`
	// StoreKey is where a --store keeps the job's files, relative to the
	// store: "jobs/ID/PLAN", PLAN a random name given when the job was
	// planned (NewStoreKey), so that two plans of one job name (two state
	// directories sharing a store) never share a key; empty for a job
	// planned before (its files under "jobs/ID"). See FilesKey.
	StoreKey  string    `json:"store_key,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Chunk is a group of requests sharing (url, model) that fits one provider
// batch. Its file holds exactly the provider's wire body.
type Chunk struct {
	Job       string     `json:"job"`
	ID        int64      `json:"id"`      // unique in the job, assigned in order
	Attempt   int        `json:"attempt"` // 1 for planned chunks, n+1 for retries
	URL       string     `json:"url"`
	Model     string     `json:"model"`
	Path      string     `json:"path"` // the chunk file, relative to the job dir
	Requests  int        `json:"requests"`
	Bytes     int64      `json:"bytes"` // wire bytes, envelope included
	EstTokens int64      `json:"est_tokens"`
	State     ChunkState `json:"state"`
	FileID    string     `json:"file_id,omitempty"`
	BatchID   string     `json:"batch_id,omitempty"`
	// BatchStatus is the provider status last seen, verbatim.
	BatchStatus string    `json:"batch_status,omitempty"`
	NextPollAt  time.Time `json:"next_poll_at,omitempty"`
	Polls       int       `json:"polls"`
	SubmittedAt time.Time `json:"submitted_at,omitempty"`
	EndedAt     time.Time `json:"ended_at,omitempty"`
	// LastError is the message of the chunk's last error and ErrorCode its
	// code (see SetError); each error is also kept as an AttemptError.
	LastError string    `json:"last_error,omitempty"`
	ErrorCode ErrorCode `json:"error_code,omitempty"`
	// Stuck says why sluice cancelled the chunk's batch as stuck ("stuck in
	// validating for 27h"); empty unless it did. What the cancelled batch
	// finished is kept; the rest fails this attempt with CodeBatchStuck.
	Stuck    string    `json:"stuck,omitempty"`
	IntentAt time.Time `json:"intent_at,omitempty"`
	// InputTokens and OutputTokens are the provider's usage for this chunk.
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// ResultsPath is the file of final results this chunk produced,
	// relative to the job dir (see results.go).
	ResultsPath string `json:"results_path,omitempty"`
	// Bound names the limit that closed this chunk: "bytes", "requests",
	// "tokens", or "end" when its group ran out of lines.
	Bound string `json:"bound,omitempty"`
	// FetchFailures counts consecutive polls of this chunk's ended batch
	// whose results could not be downloaded or read, or whose poll the
	// provider refused for good; at the dispatcher's bound the attempt
	// fails and its requests are retried.
	FetchFailures int `json:"fetch_failures,omitempty"`
	// QueueRefusals counts the times in a row this chunk's batch failed
	// token_limit_exceeded while no other batch of its model in the job was
	// live: the chunk alone is over the provider's enqueued-token limit (it
	// is split after one; a chunk of one request fails after a few).
	QueueRefusals int `json:"queue_refusals,omitempty"`
	// Splits counts the attempts of this chunk's requests that were splits
	// for the provider's enqueued-token limit (a batch of them refused
	// while alone, or a chunk not yet submitted cut smaller: see
	// dispatcher/split.go). They spend none of the job's attempts: the
	// chunk's requests may be retried while Attempt - Splits is below
	// Job.MaxAttempts.
	Splits int `json:"splits,omitempty"`
	// ResultsExpireAt is the earliest time the provider may delete the
	// results of the chunk's batch (docs/providers.md, "Results expire"):
	// its submission plus the provider's retention, refined when a poll
	// finds it ended. Zero when the retention is unknown. `sluice status`
	// warns of results not yet fetched that expire within a day; `sluice
	// run` fetches the soonest-expiring first.
	ResultsExpireAt time.Time `json:"results_expire_at,omitzero"`
	// MaxOutputTokens is the sum of its requests' max output tokens
	// (max_tokens, max_completion_tokens or max_output_tokens), and
	// NoMaxRequests counts its requests that set none: together the upper
	// bound of its output (docs/money.md).
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	NoMaxRequests   int   `json:"no_max_requests,omitempty"`
	// UsageEstTokens is, once the chunk ended, sluice's input estimate of
	// the requests whose results reported usage: InputTokens /
	// UsageEstTokens is how far the estimate was off.
	UsageEstTokens int64 `json:"usage_est_tokens,omitempty"`
	// Digest is the content digest of the chunk file as sent (ChunkDigest),
	// recorded with the chunk's first intent; empty for chunks whose first
	// intent an earlier version recorded. Find adopts a provider object only
	// when it carries this digest (docs/crash-safety.md, "Reconcile").
	Digest string `json:"digest,omitempty"`
	// FileDigest is the chunk file's XXH3-128 (FileDigestOf, 32 hex
	// characters), computed while the file is written (by the splitter at
	// plan time, by the dispatcher for a next attempt) and recorded with
	// the chunk: a file that does not give it is never sent, as it is not
	// the file this job planned (docs/scale-out.md, "Two plans, one
	// store"). Empty for chunks written by an earlier version.
	FileDigest string `json:"file_digest,omitempty"`
}

// Where a job's files at the provider stand (Job.ProviderFiles).
const (
	ProviderFilesLive    = "live"    // may still be at the provider
	ProviderFilesDeleted = "deleted" // deleted once the output was written
	ProviderFilesKept    = "kept"    // kept on request (--keep-provider-files)
)

// Request is one input line's row in the tracker.
type Request struct {
	Ordinal  int64        // 0-based among valid lines, the output order
	Line     int64        // 1-based line number in the input file
	CustomID string       // unique in the job
	Chunk    int64        // the chunk of its current attempt
	Index    int          // position in that chunk (Cloudflare answers by index)
	Offset   int64        // byte offset of its item in the chunk file
	Length   int          // byte length of its item
	Tokens   int64        // estimated input tokens
	Attempt  int          // attempt of its current chunk
	State    RequestState // pending, succeeded, failed
	// BodyKey is its key in the ledger of bought answers (docs/money.md);
	// nil when unknown.
	BodyKey []byte `json:",omitempty"`
}

// BatchRef names the chunk a provider call is for. Providers put it in
// upload filenames and batch metadata so a restart can find what a crashed
// run created (see docs/crash-safety.md).
type BatchRef struct {
	Job      string
	Chunk    int64
	Attempt  int
	URL      string
	Model    string
	Path     string // absolute path of the chunk file (the wire body)
	Requests int
	Bytes    int64
	// IntentAt is when the intent of the call was committed: providers whose
	// batches carry no metadata (Anthropic) reconcile by time and size.
	IntentAt time.Time
	// Digest is the chunk's content digest (Chunk.Digest): uploads and
	// batches carry it, and Find adopts only what carries it. Empty for a
	// chunk an earlier version began to send.
	Digest string
	// FileID is the id of the file the chunk's upload made, when the
	// tracker knows it: Find then adopts only a batch made from it.
	FileID string
}

// PlanSink records a plan as the splitter makes it. The tracker implements
// it; nothing is trusted until the plan is committed.
type PlanSink interface {
	// AddRequest records one request (buffered; written in large
	// transactions).
	AddRequest(r *Request) error
	// AddChunk records a closed chunk whose file is written; it may not
	// be synced and renamed yet (the splitter returns once every chunk
	// file is, and the plan is trusted only once committed after that).
	AddChunk(c *Chunk) error
	// FindCustomID reports the input line of an already recorded request
	// with this custom_id, if any. The splitter calls it only when its
	// in-memory filter says the id may have been seen.
	FindCustomID(customID string) (line int64, found bool, err error)
}

// Ref returns the BatchRef of a chunk whose job directory is dir.
func (c *Chunk) Ref(dir string) BatchRef {
	return BatchRef{Job: c.Job, Chunk: c.ID, Attempt: c.Attempt, URL: c.URL, Model: c.Model,
		Path: filepath.Join(dir, c.Path), Requests: c.Requests, Bytes: c.Bytes, IntentAt: c.IntentAt,
		Digest: c.Digest, FileID: c.FileID}
}

// RealtimeBatch is the BatchID of a chunk answered through the provider's
// synchronous API by the realtime fallback (docs/money.md): its usage is
// priced at the full rate.
const RealtimeBatch = "realtime"

// FallbackReason is Chunk.Stuck for a batch sluice cancelled for the
// realtime fallback (--fallback-at), not because it was stuck.
const FallbackReason = "cancelled for the realtime fallback at --fallback-at"

// Realtime reports whether the chunk was answered through the synchronous
// API (RealtimeBatch).
func (c *Chunk) Realtime() bool { return c.BatchID == RealtimeBatch }

// JobSummary is what the last merge of a job produced: counts, paths and
// times, kept by the tracker so that `sluice status` can show a finished
// job's outcome without reading its output.
type JobSummary struct {
	Output       string    `json:"output"`
	Errors       string    `json:"errors"`
	Order        string    `json:"order"`
	OutputBytes  int64     `json:"output_bytes"`
	OutputMTime  time.Time `json:"output_mtime"`
	ErrorsBytes  int64     `json:"errors_bytes"`
	Lines        int64     `json:"lines"`
	Succeeded    int64     `json:"succeeded"`
	Failed       int64     `json:"failed"`
	Retried      int64     `json:"retried"` // requests sent in more than one batch
	Batches      int       `json:"batches"`
	RetryBatches int       `json:"retry_batches"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	Cancelled    bool      `json:"cancelled,omitempty"`
	StartedAt    time.Time `json:"started_at"` // when the job was planned
	FinishedAt   time.Time `json:"finished_at"`
}

// DigestLen is the length of a chunk digest in hex characters: the first
// 128 bits of SHA-256, short enough for every provider's metadata value and
// display name, long enough that two contents never share one.
const DigestLen = 32

// ChunkDigest is the content digest of the file at path: the first
// DigestLen hex characters of the SHA-256 of its bytes, read in a stream.
func ChunkDigest(path string) (string, error) {
	dg, _, err := ChunkDigests(path, true)
	return dg, err
}

// ChunkDigests reads the file at path once, in a stream, for its
// FileDigestOf and, when withDigest, its ChunkDigest.
func ChunkDigests(path string, withDigest bool) (digest, fileDigest string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	fh := NewFileHash()
	var w io.Writer = fh
	h := sha256.New()
	if withDigest {
		w = io.MultiWriter(h, fh)
	}
	if _, err := iobuf.Copy(w, f, 1<<20); err != nil {
		return "", "", err
	}
	if withDigest {
		digest = hex.EncodeToString(h.Sum(nil))[:DigestLen]
	}
	return digest, FileDigestOf(fh), nil
}

// NewFileHash is the hash of Chunk.FileDigest, for a writer that digests a
// chunk file as it writes it: XXH3-128, cheap enough for the splitter's
// write path (SHA-256 there cost planning a fifth more CPU).
func NewFileHash() *xxh3.Hasher128 { return xxh3.New128() }

// FileDigestOf is the Chunk.FileDigest of what h has read.
func FileDigestOf(h *xxh3.Hasher128) string {
	b := h.Sum128().Bytes()
	return hex.EncodeToString(b[:])
}

// NewStoreKey is a new plan's Job.StoreKey for job id: "jobs/ID/pHEX", 64
// random bits naming this plan apart from any other plan of the same job
// name (another state directory's, or this one's before its database was
// lost), whatever their content.
func NewStoreKey(id string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported systems
	}
	return path.Join("jobs", id, "p"+hex.EncodeToString(b[:]))
}

// FilesKey is where a --store keeps the job's files: StoreKey, or
// "jobs/ID" for a job planned before plans had their own keys.
func (j *Job) FilesKey() string {
	if j.StoreKey != "" {
		return j.StoreKey
	}
	return path.Join("jobs", j.ID)
}
