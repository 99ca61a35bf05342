package sluice

// Limits are the bounds a provider puts on batches. The splitter honours the
// per-batch ones; the dispatcher honours the concurrency and queue ones.
// Zero means no limit.
type Limits struct {
	MaxBatchBytes     int64 `json:"max_batch_bytes"`     // wire bytes per batch, envelope included
	MaxBatchRequests  int   `json:"max_batch_requests"`  // requests per batch
	MaxBatchTokens    int64 `json:"max_batch_tokens"`    // estimated input tokens per batch
	MaxLiveBatches    int   `json:"max_live_batches"`    // batches live at the provider at once
	MaxEnqueuedTokens int64 `json:"max_enqueued_tokens"` // estimated input tokens live per model
}

// Override returns l with every non-zero field of o put over it.
func (l Limits) Override(o Limits) Limits {
	if o.MaxBatchBytes != 0 {
		l.MaxBatchBytes = o.MaxBatchBytes
	}
	if o.MaxBatchRequests != 0 {
		l.MaxBatchRequests = o.MaxBatchRequests
	}
	if o.MaxBatchTokens != 0 {
		l.MaxBatchTokens = o.MaxBatchTokens
	}
	if o.MaxLiveBatches != 0 {
		l.MaxLiveBatches = o.MaxLiveBatches
	}
	if o.MaxEnqueuedTokens != 0 {
		l.MaxEnqueuedTokens = o.MaxEnqueuedTokens
	}
	return l
}
