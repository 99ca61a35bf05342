package httpx

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit bounds the requests one client sends, so sluice stays under the
// provider's rate limits instead of collecting 429s.
type RateLimit struct {
	PerSecond float64 // requests per second; 0: the provider's default; negative: unlimited
	Burst     int     // requests allowed at once (default: 1, or PerSecond rounded up)
}

// Or returns r, or d when r is unset.
func (r RateLimit) Or(d RateLimit) RateLimit {
	if r.PerSecond == 0 {
		r.PerSecond = d.PerSecond
		if r.Burst == 0 {
			r.Burst = d.Burst
		}
	}
	return r
}

// Limiter is a token bucket (golang.org/x/time/rate) on an injectable
// clock, plus a pause that a 429's Retry-After imposes on every request of
// the client, not only on the one that got it. A nil *Limiter does not
// limit.
type Limiter struct {
	lim   *rate.Limiter
	clock Clock

	mu     sync.Mutex
	paused time.Time
}

// NewLimiter returns a limiter for rl on clock (nil: the system clock), or
// nil when rl is unlimited (PerSecond <= 0).
func NewLimiter(rl RateLimit, clock Clock) *Limiter {
	if rl.PerSecond <= 0 || math.IsInf(rl.PerSecond, 0) || math.IsNaN(rl.PerSecond) {
		return nil
	}
	if clock == nil {
		clock = SystemClock{}
	}
	burst := rl.Burst
	if burst <= 0 {
		burst = int(math.Ceil(rl.PerSecond))
	}
	return &Limiter{lim: rate.NewLimiter(rate.Limit(rl.PerSecond), burst), clock: clock}
}

// Wait blocks until a request may be sent, or ctx is done.
func (l *Limiter) Wait(ctx context.Context) error {
	if l == nil {
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	pause := l.paused.Sub(l.clock.Now())
	l.mu.Unlock()
	if err := sleep(ctx, l.clock, pause); err != nil {
		return err
	}
	now := l.clock.Now()
	r := l.lim.ReserveN(now, 1)
	if !r.OK() {
		return errors.New("httpx: rate limiter refuses every request")
	}
	if err := sleep(ctx, l.clock, r.DelayFrom(now)); err != nil {
		r.CancelAt(l.clock.Now())
		return err
	}
	return nil
}

// PauseUntil makes every request wait until t (a provider said so).
func (l *Limiter) PauseUntil(t time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	if t.After(l.paused) {
		l.paused = t
	}
	l.mu.Unlock()
}
