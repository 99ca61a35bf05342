package sluice

// JobState is where a job stands. Mirrored by the CHECK constraint on
// jobs.state in migrations/0001_init.sql.
type JobState string

const (
	// JobPlanning: the splitter is writing chunks and request rows. A job
	// found in this state was interrupted mid-split and is never trusted: the
	// next run deletes it and plans again. → JobPlanned.
	JobPlanning JobState = "planning"
	// JobPlanned: every chunk and request is recorded. → JobRunning.
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
