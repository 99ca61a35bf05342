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
	// MinBatchRequests is the fewest requests a batch may hold (Amazon
	// Bedrock refuses a job under its per-model minimum of records): the
	// splitter cuts no chunk under it and refuses a group of requests
	// smaller than it; the dispatcher sends no retry under it.
	MinBatchRequests int `json:"min_batch_requests,omitempty"`
}

// Override returns l with every non-zero field of o put over it.
func (l Limits) Override(o Limits) Limits {
	over(&l.MaxBatchBytes, o.MaxBatchBytes)
	over(&l.MaxBatchRequests, o.MaxBatchRequests)
	over(&l.MaxBatchTokens, o.MaxBatchTokens)
	over(&l.MaxLiveBatches, o.MaxLiveBatches)
	over(&l.MaxEnqueuedTokens, o.MaxEnqueuedTokens)
	over(&l.MinBatchRequests, o.MinBatchRequests)
	return l
}

// over sets *p to v unless v is zero (not set).
func over[T int | int64](p *T, v T) {
	if v != 0 {
		*p = v
	}
}

// ChunkTokenShare is the share of MaxEnqueuedTokens one chunk's estimate
// may fill. A chunk is submitted whole, so its estimate must fit the
// budget it is admitted under; the provider counts tokens its own way,
// above the estimate by up to 12% on the measurement and 6.6% on
// average against OpenAI's tokenizer (splitter/estimate.go), so a chunk
// cut to the full budget would be refused token_limit_exceeded (issue 11,
// item 5). 80% leaves room for that error on prose; where the provider
// counts further off (other languages, bodies that are mostly not text),
// a chunk refused alone is split and the rest cut by the ratio learned
// (dispatcher/split.go).
const ChunkTokenShare = 0.8

// ChunkTokens is the most estimated input tokens one chunk may hold:
// MaxBatchTokens, and no more than ChunkTokenShare of MaxEnqueuedTokens.
// Zero means no limit.
func (l Limits) ChunkTokens() int64 {
	n := l.MaxBatchTokens
	if l.MaxEnqueuedTokens > 0 {
		e := max(int64(float64(l.MaxEnqueuedTokens)*ChunkTokenShare), 1)
		if n <= 0 || e < n {
			n = e
		}
	}
	return n
}

// Tighter returns l with each per-batch limit of o that is tighter put
// over it (zero is no limit): the limits of a family that a routed codec
// sends some urls to (RoutedCodec).
func (l Limits) Tighter(o Limits) Limits {
	min64 := func(x, y int64) int64 {
		if x <= 0 || y > 0 && y < x {
			return y
		}
		return x
	}
	l.MaxBatchBytes = min64(l.MaxBatchBytes, o.MaxBatchBytes)
	l.MaxBatchRequests = int(min64(int64(l.MaxBatchRequests), int64(o.MaxBatchRequests)))
	l.MaxBatchTokens = min64(l.MaxBatchTokens, o.MaxBatchTokens)
	return l
}

// Bound is the one rule that cuts chunks, for the splitter and for the
// chunks of a retry alike: it names the per-batch limit that a chunk of n
// items (itemBytes bytes of items, tokens estimated input tokens, in
// envelope env) would pass if one more item of size bytes and t tokens
// were added: "bytes", "requests" or "tokens", checked in that order, or
// "" when the item fits. An empty chunk takes any item: a request over a
// limit by itself was refused when the input was read.
func (l Limits) Bound(env Envelope, n int, itemBytes, tokens, size, t int64) string {
	switch {
	case n == 0:
		return ""
	case l.MaxBatchBytes > 0 && env.Size(n+1, itemBytes+size) > l.MaxBatchBytes:
		return "bytes"
	case l.MaxBatchRequests > 0 && n+1 > l.MaxBatchRequests:
		return "requests"
	case l.ChunkTokens() > 0 && tokens+t > l.ChunkTokens():
		return "tokens"
	}
	return ""
}
