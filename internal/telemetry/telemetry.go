// Package telemetry carries what the HTTP layer and the dispatcher observe
// (API calls, retries, reconciles) to whoever counts them: the command's
// Prometheus metrics (cmd/sluice/metrics.go, docs/monitoring.md) set a
// Sink for the run; with none set (the default) an observation costs one
// atomic load.
package telemetry

import (
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
)

// Sink receives observations; it must be safe for concurrent use and must
// not block.
type Sink interface {
	// APICall is one HTTP attempt to a provider: code is its status, 0
	// when no answer came; d is the time to the answer's headers.
	APICall(endpoint, method string, code int, d time.Duration)
	// APIRetry is a failed attempt about to be repeated.
	APIRetry(endpoint, method string)
	// Reconcile is a lookup at the provider of what a call may have done:
	// kind "chunk" for a chunk a killed run left mid-call, "call" for an
	// attempt whose answer was lost.
	Reconcile(kind string)
}

type box struct{ s Sink }

var sink atomic.Pointer[box]

// Set makes s the process's sink (nil: none).
func Set(s Sink) {
	if s == nil {
		sink.Store(nil)
		return
	}
	sink.Store(&box{s})
}

// Get returns the sink, or nil.
func Get() Sink {
	if b := sink.Load(); b != nil {
		return b.s
	}
	return nil
}

// Endpoint names u's path for a label: segments that look like ids
// (batch, file and request ids, model names with versions) become {id},
// so the label has a bounded set of values. A segment's ":verb" suffix
// (Gemini's models/X:batchGenerateContent) is kept.
func Endpoint(u *url.URL) string {
	if u == nil {
		return ""
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i, s := range segs {
		name, verb, hasVerb := strings.Cut(s, ":")
		if idLike(name) {
			name = "{id}"
		}
		if hasVerb {
			name += ":" + verb
		}
		segs[i] = name
	}
	return "/" + strings.Join(segs, "/")
}

func idLike(s string) bool {
	if len(s) >= 20 {
		return true
	}
	if len(s) < 8 {
		return false
	}
	return strings.IndexFunc(s, unicode.IsDigit) >= 0
}
