package httpx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-batch/sluice"
)

// Clock is the time source of the retry loop and the rate limiter, so tests
// do not sleep: sluice's one Clock.
type Clock = sluice.Clock

// SystemClock is the wall clock.
type SystemClock = sluice.SystemClock

// FakeClock is a Clock whose After fires at once and moves its time forward
// by the duration asked: code that sleeps runs instantly, and the sleeps are
// recorded. Safe for concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *FakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	c.sleeps = append(c.sleeps, d)
	now := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

// Advance moves the clock forward without a sleep being recorded.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Sleeps returns the durations slept so far.
func (c *FakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// sleep waits d on clock, or until ctx is done.
func sleep(ctx context.Context, clock Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clock.After(d):
		return nil
	}
}

// Retry is the retry policy of one Client. Zero fields take the defaults.
//
// A call is retried after a connection error (refused, reset, EOF, also in
// the middle of a request or response body), or an answer 408, 409, 429 or
// 5xx (Anthropic's 529 included), unless the answer carries
// "x-should-retry: false". Other 4xx answers are never retried.
//
// The wait before retry n (n = 1, 2, ...) is BaseDelay·2^(n-1), capped at
// MaxDelay, minus up to Jitter of it at random. When the answer asks for a
// wait (Retry-After-Ms, else Retry-After in seconds or as an HTTP-date), that
// wait is used instead, exactly, even above MaxDelay; an answer asking for
// more than MaxWait ends the retries and the *sluice.APIError (with its
// RetryAfter) goes to the caller, which can schedule the call later. Retries
// also end after MaxAttempts attempts, or when the next wait would take the
// waits of the call past MaxTotalWait.
type Retry struct {
	MaxAttempts  int           // attempts in all, the first included (default 8; 1 disables retries)
	BaseDelay    time.Duration // first computed wait (default 0.5 s)
	MaxDelay     time.Duration // cap on a computed wait (default 60 s)
	MaxWait      time.Duration // cap on one wait asked by the server (default 5 min)
	MaxTotalWait time.Duration // cap on the waits of one call (default 10 min)
	Jitter       float64       // share of a computed wait removed at random (default 0.25; negative: none)
}

// Retry defaults.
const (
	DefaultMaxAttempts  = 8
	DefaultBaseDelay    = 500 * time.Millisecond
	DefaultMaxDelay     = 60 * time.Second
	DefaultMaxWait      = 5 * time.Minute
	DefaultMaxTotalWait = 10 * time.Minute
	DefaultJitter       = 0.25
)

// WithDefaults returns r with its zero fields set to the defaults.
func (r Retry) WithDefaults() Retry {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = DefaultBaseDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultMaxDelay
	}
	if r.MaxWait <= 0 {
		r.MaxWait = DefaultMaxWait
	}
	if r.MaxTotalWait <= 0 {
		r.MaxTotalWait = DefaultMaxTotalWait
	}
	if r.Jitter == 0 {
		r.Jitter = DefaultJitter
	}
	if r.Jitter < 0 {
		r.Jitter = 0
	}
	if r.Jitter > 1 {
		r.Jitter = 1
	}
	return r
}

// Backoff is the computed wait before retry n (1-based), for a random
// number rnd in [0, 1). r must have its defaults.
func (r Retry) Backoff(n int, rnd float64) time.Duration {
	d := float64(r.BaseDelay) * math.Pow(2, float64(n-1))
	if d > float64(r.MaxDelay) || math.IsInf(d, 0) {
		d = float64(r.MaxDelay)
	}
	return time.Duration(d * (1 - r.Jitter*rnd))
}

// next decides the wait after failed attempt n (1-based): hint is the wait
// the server asked for (when asked), waited the waits of the call so far.
func (r Retry) next(n int, hint time.Duration, asked bool, waited time.Duration, rnd float64) (time.Duration, bool) {
	if n >= r.MaxAttempts {
		return 0, false
	}
	d := r.Backoff(n, rnd)
	if asked {
		if hint > r.MaxWait {
			return 0, false
		}
		d = hint
	}
	if waited+d > r.MaxTotalWait {
		return 0, false
	}
	return d, true
}

// retryableTransport reports whether a failure to get an answer is worth
// another attempt: every connection failure is, but not a certificate the
// client refuses.
func retryableTransport(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return false
	}
	return true
}

// RetryAfter returns the wait an answer asks for: Retry-After-Ms
// (milliseconds), else Retry-After (seconds, or an HTTP-date taken relative
// to now). Header names match case-insensitively. ok is false when neither
// is present and valid, or the wait is not positive.
func RetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := header(h, "Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms > 0 && !math.IsInf(ms, 0) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	if v := header(h, "Retry-After"); v != "" {
		return ParseRetryAfter(v, now)
	}
	return 0, false
}

// ParseRetryAfter parses a Retry-After value: seconds (integer or decimal)
// or an HTTP-date, relative to now.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || math.IsInf(s, 0) || s > 1e9 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}

// header is h.Get, falling back to a case-insensitive scan for headers
// stored under a non-canonical key.
func header(h http.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}
