package sluice

import "time"

// Clock is the one time source of the parts that wait or stamp times: the
// dispatcher's schedule, the providers' HTTP retry loop and rate limiter
// (provider/httpx). Tests give a fake one (httpx.FakeClock) so nothing
// sleeps for real.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time                         { return time.Now() }
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
