package sluice

import "context"

// Outcome is a request's final state as a chunk's end decides it.
type Outcome struct {
	Ordinal int64
	State   RequestState // RequestSucceeded or RequestFailed
	// Offset and Length locate its record in the chunk's results file
	// (the ledger of bought answers points there; docs/money.md).
	Offset, Length int64
}

// Finish is everything that changes, in one transaction, when a chunk's
// batch has ended and its results are read: the chunk's own end, the
// requests it made final, the requests it moved to chunks of the next
// attempt, and those new chunks (their files already written and synced).
type Finish struct {
	Chunk    *Chunk     // with its new state, usage, results path, ended time
	From     ChunkState // the state the chunk must still be in
	Outcomes []Outcome
	Moved    []Request // Ordinal, Chunk, Index, Offset, Length, Attempt set
	// NewChunks are the chunks of the next attempt. One whose ID is 0 or
	// less gets its id from the store, in the same transaction, so that
	// workers finishing chunks of one job at once never hand out the same
	// id; such an ID is a placeholder, distinct among NewChunks, that the
	// Moved requests name as their Chunk. The store writes the ids it gave
	// back into NewChunks and Moved once committed.
	NewChunks []*Chunk
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
