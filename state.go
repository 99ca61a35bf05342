package sluice

import (
	"errors"
	"fmt"
)

// JobState is where a job stands. Mirrored by the CHECK constraint on
// jobs.state in migrations/0001_init.sql. The moves between states are
// the table jobTransitions (CanTransition), enforced by the tracker.
type JobState string

const (
	// JobPlanning: the splitter is writing chunks and request rows. A job
	// found in this state was interrupted mid-split and is never trusted: the
	// next run deletes it and plans again. → JobPlanned.
	JobPlanning JobState = "planning"
	// JobPlanned: every chunk and request is recorded. → JobRunning,
	// JobCancelled (sluice cancel before any run).
	JobPlanned JobState = "planned"
	// JobRunning: the dispatcher drives chunks. → JobMerging, JobCancelled.
	JobRunning JobState = "running"
	// JobMerging: every request is final; the merger writes the output.
	// → JobDone.
	JobMerging JobState = "merging"
	// JobDone: the output file is written. Terminal.
	JobDone JobState = "done"
	// JobCancelled: the user cancelled the job's live batches; what finished
	// is kept and merged. → JobMerging.
	JobCancelled JobState = "cancelled"
)

// JobStates lists every job state, in the order a job usually meets them.
var JobStates = []JobState{JobPlanning, JobPlanned, JobRunning, JobCancelled, JobMerging, JobDone}

// jobTransitions is the table of legal job state transitions: every move a
// job's state may make, and no other. Each tracker enforces it in its
// guarded updates (tracker.DB.SetJobState and the state changes made with
// a plan's commit, a cancel and a job's finish), so a move not listed here
// is an error, never a comment. docs/architecture.md draws it.
var jobTransitions = transitionTable[JobState]{
	JobPlanning:  {JobPlanned},
	JobPlanned:   {JobRunning, JobCancelled},
	JobRunning:   {JobMerging, JobCancelled},
	JobCancelled: {JobMerging},
	JobMerging:   {JobDone},
	JobDone:      nil,
}

// CanTransition reports whether a job may move from state from to state
// to (jobTransitions).
func (from JobState) CanTransition(to JobState) bool { return jobTransitions.allows(from, to) }

// ErrIllegalTransition is wrapped by every TransitionError.
var ErrIllegalTransition = errors.New("illegal job state transition")

// TransitionError is a job state change the transition table refuses.
// Trackers return it (wrapped) before touching the database, whatever
// their backend.
type TransitionError struct {
	Job      string
	From, To JobState
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("job %s: %s -> %s: %v (allowed from %s: %s)", e.Job, e.From, e.To, ErrIllegalTransition, e.From,
		jobTransitions.next(e.From))
}

func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }

// CheckTransition returns a *TransitionError when job may not move from
// state from to state to, and nil when it may.
func CheckTransition(job string, from, to JobState) error {
	if from.CanTransition(to) {
		return nil
	}
	return &TransitionError{Job: job, From: from, To: to}
}

// ChunkState is where a chunk stands in the crash-safe protocol of
// docs/crash-safety.md: intent states (uploading, creating) are committed before the
// provider call, outcome states after it.
type ChunkState string

const (
	// ChunkPending: the chunk file is written; nothing was sent. → ChunkUploading
	// (providers with files) or ChunkCreating.
	ChunkPending ChunkState = "pending"
	// ChunkUploading: intent to upload is committed. → ChunkUploaded, or back
	// to ChunkPending after a refused upload. On restart: reconcile with the
	// provider's file listing.
	ChunkUploading ChunkState = "uploading"
	// ChunkUploaded: the provider's file id is recorded. → ChunkCreating.
	ChunkUploaded ChunkState = "uploaded"
	// ChunkCreating: intent to create a batch is committed. → ChunkSubmitted,
	// or back to ChunkUploaded/ChunkPending when the create was refused. On
	// restart: reconcile with the provider's batch listing.
	ChunkCreating ChunkState = "creating"
	// ChunkSubmitted: the batch id is recorded; the batch is live at the
	// provider and polled. → ChunkDone, ChunkFailed, ChunkPending (queue full).
	ChunkSubmitted ChunkState = "submitted"
	// ChunkDone: the batch ended and every request's outcome is recorded;
	// retryable requests went to a chunk of the next attempt. Terminal.
	ChunkDone ChunkState = "done"
	// ChunkFailed: the batch failed for good (validation, or attempts spent);
	// its requests are final failures or were regrouped. Terminal.
	ChunkFailed ChunkState = "failed"
)

// Live reports whether a chunk in this state may have a batch running at the
// provider.
func (s ChunkState) Live() bool {
	return s == ChunkCreating || s == ChunkSubmitted
}

// Terminal reports whether the chunk needs no more work.
func (s ChunkState) Terminal() bool { return s == ChunkDone || s == ChunkFailed }

// RequestState is where one request stands.
type RequestState string

const (
	// RequestPending: in a chunk that has not ended. → any other state.
	RequestPending RequestState = "pending"
	// RequestSucceeded: a success is recorded. Terminal.
	RequestSucceeded RequestState = "succeeded"
	// RequestFailed: failed for good (a 4xx from the endpoint, or attempts
	// spent). Terminal.
	RequestFailed RequestState = "failed"
)

// BatchStatus is a provider batch's status in OpenAI's vocabulary; every
// provider maps its own statuses onto it.
type BatchStatus string

const (
	BatchValidating BatchStatus = "validating"
	BatchInProgress BatchStatus = "in_progress"
	BatchFinalizing BatchStatus = "finalizing"
	BatchCompleted  BatchStatus = "completed"
	BatchFailed     BatchStatus = "failed"
	BatchExpired    BatchStatus = "expired"
	BatchCancelling BatchStatus = "cancelling"
	BatchCancelled  BatchStatus = "cancelled"
)

// Ended reports whether the batch will not change any more.
func (s BatchStatus) Ended() bool {
	switch s {
	case BatchCompleted, BatchFailed, BatchExpired, BatchCancelled:
		return true
	}
	return false
}
