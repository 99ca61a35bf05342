package sluice

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ChunkStates lists every chunk state, in the order a chunk usually meets
// them.
var ChunkStates = []ChunkState{ChunkPending, ChunkUploading, ChunkUploaded, ChunkCreating, ChunkSubmitted,
	ChunkDone, ChunkFailed}

// chunkTransitions is the table of legal chunk state moves: the
// crash-safety protocol of docs/crash-safety.md (intent, call, outcome;
// an intent rolled back or reconciled), and no other. Each tracker
// enforces it in Store.UpdateChunk and Store.FinishChunk before touching
// the database. A move to the same state records facts without moving
// (a poll, an error, a look again later) and is allowed in every state
// that is not terminal; every state that is not terminal may end the
// chunk (done, or failed: a batch's end, an attempt refused for good, a
// cancelled job's chunk abandoned, the realtime fallback's answers).
var chunkTransitions = transitionTable[ChunkState]{
	// Intent to upload (providers with files), or to create.
	ChunkPending: {ChunkPending, ChunkUploading, ChunkCreating, ChunkDone, ChunkFailed},
	// The upload's outcome; refused: back to pending; reconciled: the file
	// or a batch found, or nothing (pending).
	ChunkUploading: {ChunkUploading, ChunkUploaded, ChunkPending, ChunkSubmitted, ChunkDone, ChunkFailed},
	// Intent to create.
	ChunkUploaded: {ChunkUploaded, ChunkCreating, ChunkDone, ChunkFailed},
	// The create's outcome; refused: back to uploaded or pending;
	// reconciled: the batch found, else the step before.
	ChunkCreating: {ChunkCreating, ChunkSubmitted, ChunkUploaded, ChunkPending, ChunkDone, ChunkFailed},
	// The batch's end; the provider's queue full: submitted again from
	// the uploaded file, or from the start.
	ChunkSubmitted: {ChunkSubmitted, ChunkPending, ChunkUploaded, ChunkDone, ChunkFailed},
	ChunkDone:      nil,
	ChunkFailed:    nil,
}

// CanTransition reports whether a chunk may move from state from to state
// to (chunkTransitions).
func (from ChunkState) CanTransition(to ChunkState) bool { return chunkTransitions.allows(from, to) }

// ErrIllegalChunkTransition is wrapped by every ChunkTransitionError.
var ErrIllegalChunkTransition = errors.New("illegal chunk state transition")

// ChunkTransitionError is a chunk state change the transition table
// refuses. Trackers return it before touching the database, whatever
// their backend.
type ChunkTransitionError struct {
	Job      string
	Chunk    int64
	From, To ChunkState
}

func (e *ChunkTransitionError) Error() string {
	return fmt.Sprintf("job %s: chunk %d: %s -> %s: %v (allowed from %s: %s)", e.Job, e.Chunk, e.From, e.To,
		ErrIllegalChunkTransition, e.From, chunkTransitions.next(e.From))
}

func (e *ChunkTransitionError) Unwrap() error { return ErrIllegalChunkTransition }

// CheckChunkTransition returns a *ChunkTransitionError when chunk c may
// not move from state from to its state c.State, and nil when it may.
func CheckChunkTransition(c *Chunk, from ChunkState) error {
	if from.CanTransition(c.State) {
		return nil
	}
	return &ChunkTransitionError{Job: c.Job, Chunk: c.ID, From: from, To: c.State}
}

// transitionTable is a table of state moves (the job's, the chunk's):
// from each state, the states it may move to.
type transitionTable[S ~string] map[S][]S

func (t transitionTable[S]) allows(from, to S) bool { return slices.Contains(t[from], to) }

// next lists the states from may move to, for messages.
func (t transitionTable[S]) next(from S) string {
	var ns []string
	for _, s := range t[from] {
		ns = append(ns, string(s))
	}
	if len(ns) == 0 {
		return "none"
	}
	return strings.Join(ns, ", ")
}
