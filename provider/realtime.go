package provider

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-batch/sluice/provider/httpx"
)

// RateHeaders names a provider's rate-limit headers: how many requests and
// tokens are left, and when each count resets (Reset parses the latter).
type RateHeaders struct {
	RequestsLeft, RequestsReset string
	TokensLeft, TokensReset     string
	// Reset reads a reset header's value at now: when the count resets.
	Reset func(v string, now time.Time) (time.Time, bool)
}

// OpenAIRateHeaders: x-ratelimit-remaining-requests and
// x-ratelimit-reset-requests ("1s", "6m0s"), and the same for tokens.
var OpenAIRateHeaders = RateHeaders{
	RequestsLeft: "X-Ratelimit-Remaining-Requests", RequestsReset: "X-Ratelimit-Reset-Requests",
	TokensLeft: "X-Ratelimit-Remaining-Tokens", TokensReset: "X-Ratelimit-Reset-Tokens",
	Reset: func(v string, now time.Time) (time.Time, bool) {
		d, err := time.ParseDuration(v)
		return now.Add(d), err == nil && d > 0
	},
}

// AnthropicRateHeaders: anthropic-ratelimit-requests-remaining and
// anthropic-ratelimit-requests-reset (RFC 3339), and the same for tokens.
var AnthropicRateHeaders = RateHeaders{
	RequestsLeft: "Anthropic-Ratelimit-Requests-Remaining", RequestsReset: "Anthropic-Ratelimit-Requests-Reset",
	TokensLeft: "Anthropic-Ratelimit-Tokens-Remaining", TokensReset: "Anthropic-Ratelimit-Tokens-Reset",
	Reset: func(v string, now time.Time) (time.Time, bool) {
		t, err := time.Parse(time.RFC3339, v)
		return t, err == nil && t.After(now)
	},
}

// RealtimeLimits follows the rate-limit headers of a synchronous API's
// answers (the realtime fallback). An answer tells how many requests were
// left when the provider admitted its call; less the calls that may have
// been admitted after it (started since, or still in flight), that is how
// many more may start before the reset it names. Start waits
// while none may (or while no tokens are left), until that reset. A 429
// past them is still retried by the HTTP layer, honouring Retry-After.
type RealtimeLimits struct {
	mu      sync.Mutex
	started int64     // calls started
	flying  int64     // calls started and not Done
	budget  int64     // calls that may still start before resetAt
	resetAt time.Time // zero: no count known
	until   time.Time // no call starts before
}

// Start blocks until a call may start, or ctx is done, and returns the
// call's sequence number for Observe.
func (l *RealtimeLimits) Start(ctx context.Context) (int64, error) {
	for {
		l.mu.Lock()
		now := time.Now()
		if !l.resetAt.IsZero() && !now.Before(l.resetAt) {
			l.resetAt = time.Time{} // a new window: unknown until an answer says
		}
		wait := l.until.Sub(now)
		if wait <= 0 && !l.resetAt.IsZero() && l.budget <= 0 {
			wait = l.resetAt.Sub(now)
		}
		if wait <= 0 {
			l.started++
			l.flying++
			if !l.resetAt.IsZero() {
				l.budget--
			}
			seq := l.started
			l.mu.Unlock()
			return seq, nil
		}
		l.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
}

// Done ends a call Start let start.
func (l *RealtimeLimits) Done() {
	l.mu.Lock()
	l.flying--
	l.mu.Unlock()
}

// Observe reads the rate-limit headers, named by rh, of the answer to the
// call Start numbered seq; lim (the client's limiter, if any) is paused
// when no tokens are left.
func (l *RealtimeLimits) Observe(h http.Header, seq int64, lim *httpx.Limiter, rh RateHeaders) {
	now := time.Now()
	left := func(name string) (int64, bool) {
		n, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64)
		return n, err == nil
	}
	reset := func(name string) (time.Time, bool) {
		t, ok := rh.Reset(strings.TrimSpace(h.Get(name)), now)
		return t, ok && t.Sub(now) <= 24*time.Hour
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := left(rh.RequestsLeft); ok {
		if at, ok := reset(rh.RequestsReset); ok {
			// Calls started since this one, and those still in flight that
			// started before it, may have been admitted after it.
			est := n - (l.started - seq) - (l.flying - 1)
			if !l.resetAt.IsZero() && !at.After(l.resetAt.Add(time.Second)) {
				// The same window: what is left only shrinks, and an answer
				// read late may not count calls admitted after it.
				l.budget = min(l.budget, est)
			} else {
				l.budget, l.resetAt = est, at
			}
		}
	}
	if n, ok := left(rh.TokensLeft); ok && n <= 0 {
		if at, ok := reset(rh.TokensReset); ok && at.After(l.until) {
			l.until = at
			lim.PauseUntil(at)
		}
	}
}
