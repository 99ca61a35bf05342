package sluice

import "context"

// Outcome is a request's final state as a chunk's end decides it.
type Outcome struct {
	Ordinal int64
	State   RequestState // RequestSucceeded or RequestFailed
	// Offset and Length locate its record in the chunk's results file
	// (the ledger of bought answers points there; docs/money.md).
	Offset, Length int64
	// CustomID and BodyKey, when set, are the request's as ChunkRequests
	// gave them: what the ledger keeps of a success. With them the SQLite
	// tracker settles a paged chunk without reading its pages again
	// (tracker/pages.go); without them it reads them.
	CustomID string
	BodyKey  []byte
}

// Finish is everything that changes, in one transaction, when a chunk's
// batch has ended and its results are read: the chunk's own end, the
// requests it made final, the requests it moved to chunks of the next
// attempt, and those new chunks (their files already written and synced).
//
// The new chunks' ids are the store's to give, in the same transaction
// (one above the job's largest, in order), since several workers may end
// chunks at once: a new chunk with ID 0 gets its id there, written into
// it, and a moved request names its new chunk by NewChunkRef of the
// chunk's position in NewChunks.
type Finish struct {
	Chunk     *Chunk     // with its new state, usage, results path, ended time
	From      ChunkState // the state the chunk must still be in
	Outcomes  []Outcome
	Moved     []Request // Ordinal, Chunk, Index, Offset, Length, Attempt set
	NewChunks []*Chunk
	// Also are further chunks, not yet sent, ended in the same
	// transaction, each with its Chunk, From and Moved (no outcomes, no
	// chunks of its own): its requests move into this finish's NewChunks,
	// named by NewChunkRef. Retries of a few requests combined into one
	// batch end their chunks so (dispatcher/combine.go).
	Also []*Finish
}

// NewChunkRef is how a request moved by a Finish names the new chunk at
// position i of Finish.NewChunks before the store has given it its id.
func NewChunkRef(i int) int64 { return -1 - int64(i) }

// NewChunkIndex is the position in Finish.NewChunks that a moved
// request's Chunk names, if it names one by NewChunkRef.
func NewChunkIndex(chunk int64) (int, bool) {
	if chunk >= 0 {
		return 0, false
	}
	return int(-1 - chunk), true
}

// Store is the tracker as the dispatcher and the commands see it.
type Store interface {
	Job(ctx context.Context, id string) (*Job, error)
	SetJobState(ctx context.Context, id string, from, to JobState) error
	// Chunks returns every chunk of a job, in id order.
	Chunks(ctx context.Context, job string) ([]*Chunk, error)
	// UpdateChunk writes c's state and mutable fields if the chunk is
	// still in state from; otherwise it returns a conflict error. A last
	// error (Chunk.SetError) other than the one stored is also kept, in
	// the same transaction, as an AttemptError; so is FinishChunk's.
	UpdateChunk(ctx context.Context, c *Chunk, from ChunkState) error
	// ChunkRequests calls fn for each request of a chunk in index order.
	ChunkRequests(ctx context.Context, job string, chunk int64, fn func(*Request) error) error
	// FinishChunk applies f in one transaction.
	FinishChunk(ctx context.Context, f *Finish) error
	// RequestStates counts a job's requests by state.
	RequestStates(ctx context.Context, job string) (map[RequestState]int64, error)
	// Expected calls fn for every request of a job in ordinal order.
	Expected(ctx context.Context, job string, fn func(ordinal int64, customID string) bool) error
}

// RealtimeCall is the tracker's record of one request of a chunk sent
// through the provider's synchronous API by the realtime fallback
// (docs/crash-safety.md, "The realtime fallback"): written as
// RealtimeSending before the call, and with its answer after it.
type RealtimeCall struct {
	Chunk int64
	Index int // the request's position in the chunk
	State string
	Kind  ResultKind // the answer's (RealtimeAnswered)
	Line  []byte     // the answer's OutputLine, as JSON (RealtimeAnswered)
	Usage Usage
}

// RealtimeCall states.
const (
	RealtimeSending  = "realtime_sending"
	RealtimeAnswered = "answered"
)

// RealtimeStore is the tracker's log of realtime calls; tracker.DB and
// tracker.Postgres implement it.
type RealtimeStore interface {
	// RealtimeChunks returns the job's chunks that have realtime calls
	// recorded: chunks committed to the synchronous API.
	RealtimeChunks(ctx context.Context, job string) ([]int64, error)
	// RealtimeCalls returns the calls recorded for a chunk, by index.
	RealtimeCalls(ctx context.Context, job string, chunk int64) ([]RealtimeCall, error)
	// RealtimeIntent records, before the call, that request index of chunk
	// is being sent (RealtimeSending); false when a call is already
	// recorded for it, which must then not be sent.
	RealtimeIntent(ctx context.Context, job string, chunk int64, index int) (bool, error)
	// RealtimeAnswer records the call's answer.
	RealtimeAnswer(ctx context.Context, job string, c RealtimeCall) error
}
