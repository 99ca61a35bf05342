// Package httpx is the HTTP layer every provider client shares: a retry
// policy with an injectable clock, a client-side rate limiter, error
// decoding into *sluice.APIError with credentials redacted, streamed
// request bodies (a chunk file or a multipart upload of it, with an exact
// Content-Length, re-opened on every attempt), downloads written to a
// temp file and renamed, and answers streamed to a reader (Stream).
package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/internal/telemetry"
)

// Config configures a Client. Only the credential fields are required to
// talk to a real provider.
type Config struct {
	HTTP *http.Client // default: DefaultHTTPClient()
	// Retry is the retry policy; zero fields take the defaults.
	Retry Retry
	// Limiter, when set, is shared with other clients of the same provider
	// account; else one is built from RateLimit.
	Limiter   *Limiter
	RateLimit RateLimit
	// AuthHeader carries APIKey on every request: "Authorization" (with
	// AuthScheme "Bearer"), "api-key" (Azure) or "x-api-key" (Anthropic).
	// Nothing is sent when APIKey is empty. The key never appears in errors
	// or logs.
	AuthHeader string
	AuthScheme string
	APIKey     string
	// Header is sent with every request (anthropic-version, ...).
	Header http.Header
	// Errors decodes error bodies (default OpenAIErrors).
	Errors ErrorDecoder
	Clock  Clock // default: the system clock
	Logger zerolog.Logger
	// MaxJSONBytes bounds a JSON answer read into memory (default 64 MiB).
	MaxJSONBytes int64
	// Rand returns numbers in [0, 1) for the jitter (default math/rand/v2).
	Rand func() float64
}

// Client sends requests to one provider with retries, a rate limit, auth
// and error decoding. Safe for concurrent use.
type Client struct {
	http    *http.Client
	retry   Retry
	lim     *Limiter
	auth    string // header value
	authHdr string
	header  http.Header
	errors  ErrorDecoder
	clock   Clock
	log     zerolog.Logger
	maxJSON int64
	rand    func() float64
	red     redactor
	// downSince is when calls of this client stopped getting any answer
	// (unix nanoseconds; 0 while the endpoint answers). See unreachable.
	downSince atomic.Int64
}

// DefaultHTTPClient is the http.Client used when none is given: no overall
// timeout (downloads and uploads of hundreds of MB take what they take;
// contexts bound them), but bounded connect and header waits.
func DefaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 10 * time.Minute
	t.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: t}
}

// New returns a client for cfg.
func New(cfg Config) *Client {
	c := &Client{
		http:    cfg.HTTP,
		retry:   cfg.Retry.WithDefaults(),
		lim:     cfg.Limiter,
		authHdr: cfg.AuthHeader,
		header:  cfg.Header.Clone(),
		errors:  cfg.Errors,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		maxJSON: cfg.MaxJSONBytes,
		rand:    cfg.Rand,
	}
	if c.http == nil {
		c.http = DefaultHTTPClient()
	}
	if c.clock == nil {
		c.clock = SystemClock{}
	}
	if c.lim == nil {
		c.lim = NewLimiter(cfg.RateLimit, c.clock)
	}
	if c.errors == nil {
		c.errors = OpenAIErrors
	}
	if c.maxJSON <= 0 {
		c.maxJSON = 64 << 20
	}
	if c.rand == nil {
		c.rand = rand.Float64
	}
	if cfg.APIKey != "" {
		if c.authHdr == "" {
			c.authHdr = "Authorization"
		}
		c.auth = cfg.APIKey
		if cfg.AuthScheme != "" {
			c.auth = cfg.AuthScheme + " " + cfg.APIKey
		}
		c.red = newRedactor(c.auth, cfg.APIKey)
	}
	return c
}

// Limiter returns the client's rate limiter (nil when unlimited).
func (c *Client) Limiter() *Limiter { return c.lim }

// Redact removes the client's credentials (and anything shaped like one)
// from s.
func (c *Client) Redact(s string) string { return c.red.String(s) }

// Call is one logical request, sent in as many attempts as the retry policy
// allows.
type Call struct {
	Method string
	URL    string
	Header http.Header
	Body   BodyFunc // nil: no body
	// Reconcile, when set, is called when an attempt may have taken effect
	// at the provider although no answer said so (the connection failed
	// after the whole body was sent, or a 2xx answer broke mid-body), before
	// the call is repeated and before giving up. It looks for what the call
	// would have created; done true ends the call with ErrReconciled, so a
	// create is not repeated into a duplicate. When Reconcile itself fails,
	// the call ends with an error wrapping sluice.ErrUnsettled: it is not
	// repeated blind.
	Reconcile func(ctx context.Context) (done bool, err error)
	// Statuses are non-2xx statuses handled as answers, not errors (the
	// 302 of Together's upload, sent by a client that does not follow
	// redirects).
	Statuses []int
}

// ErrReconciled ends a call whose Reconcile found its effect at the
// provider.
var ErrReconciled = errors.New("httpx: the call took effect; adopted by reconciliation")

// ReadError is a failure while reading an answer's body (a reset, an
// unexpected EOF): the call is retried.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "read answer: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Do sends a request and returns its 2xx answer, whose Body the caller
// must close. A non-2xx answer, once retries are spent, is returned as a
// *sluice.APIError.
func (c *Client) Do(ctx context.Context, method, url string, hdr http.Header, body BodyFunc) (*http.Response, error) {
	var out *http.Response
	err := c.Send(ctx, Call{Method: method, URL: url, Header: hdr, Body: body}, func(r *http.Response) error {
		out = r
		return nil
	})
	return out, err
}

// JSON sends call and decodes its 2xx answer into out (nil: discarded).
// The answer is read inside the retry loop, so a connection broken
// mid-answer is retried.
func (c *Client) JSON(ctx context.Context, call Call, out any) error {
	return c.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxJSON+1))
		if err != nil {
			return err
		}
		if int64(len(b)) > c.maxJSON {
			return fmt.Errorf("%s %s: answer larger than %d bytes", call.Method, call.URL, c.maxJSON)
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w (%s)", call.Method, call.URL, err, c.red.String(snippet(b, 200)))
		}
		return nil
	})
}

// Download sends call and streams its 2xx answer into path: written to a
// temp file in path's directory, synced and renamed, so path is either
// absent or complete. A connection broken mid-answer restarts the download.
// It returns the bytes written.
func (c *Client) Download(ctx context.Context, call Call, path string) (int64, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Abort() // nothing once committed
	var n int64
	err = c.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		var err error
		n, err = copyBody(f, resp.Body)
		return err
	})
	if err == nil {
		err = f.Commit()
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Stream sends call and hands the body of its 2xx answer to read, which
// consumes it as it arrives: nothing is written to disk (docs/crash-safety.md,
// "Files"). read reports whether it handed anything on to its own caller
// (started) along with its error.
//
// An answer that breaks (a *ReadError: a reset, a body cut short, ctx
// cancelled mid-body) before read handed anything on is retried like any
// call of Send, with its backoff. Once read handed something on, it is not:
// a repeat would hand the same data on twice, and resuming mid-answer is not
// offered. The call then ends with a *BrokenError, and the caller must
// discard what it got and start over.
func (c *Client) Stream(ctx context.Context, call Call, read func(body io.Reader) (started bool, err error)) error {
	return c.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		started, err := read(resp.Body)
		var re *ReadError
		if err != nil && started && errors.As(err, &re) {
			return &BrokenError{msg: err.Error(), err: re.Err}
		}
		return err
	})
}

// BrokenError is an answer of Stream that broke after some of it was handed
// on: not retried. It matches sluice.ErrStreamBroken and unwraps to the
// read failure (a net.Error, an io.ErrUnexpectedEOF, a context error),
// never to a *ReadError, so no caller retries it by mistake.
type BrokenError struct {
	msg string
	err error
}

func (e *BrokenError) Error() string {
	return e.msg + " (after part of the answer was read: not repeated mid-answer)"
}
func (e *BrokenError) Unwrap() []error { return []error{e.err, sluice.ErrStreamBroken} }

// downloadBuffer is the size of the writes of a download.
const downloadBuffer = 1 << 20

// copyBody is io.Copy(w, r) through one buffer of downloadBuffer bytes,
// filled before each write. io.Copy to an *os.File goes through its
// ReadFrom, which writes each 32 KB read (or less: what the socket had) as
// it comes: hundreds of thousands of write calls for a result file of a
// few hundred MB.
func copyBody(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, downloadBuffer)
	var n int64
	for {
		m := 0
		var rerr error
		for m < len(buf) && rerr == nil {
			var k int
			k, rerr = r.Read(buf[m:])
			m += k
		}
		if m > 0 {
			if _, err := w.Write(buf[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// Send sends call until it gets a 2xx answer, then gives it to handle,
// which owns the body. An error of handle wrapping a *ReadError is retried;
// any other ends the call.
func (c *Client) Send(ctx context.Context, call Call, handle func(*http.Response) error) error {
	var (
		waited    time.Duration
		lastErr   error
		ambiguous bool // some attempt may have taken effect
	)
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return ctxErr(err, lastErr)
		}
		// An endpoint that answers nothing counts no rate: while the client
		// is down, attempts do not queue behind the limiter (a run halting
		// on an unreachable endpoint would else wait a token per call).
		if c.downSince.Load() == 0 {
			if err := c.lim.Wait(ctx); err != nil {
				return ctxErr(err, lastErr)
			}
		}
		resp, sent, err := c.attempt(ctx, call)
		v, done, derr := c.judge(ctx, call, resp, sent, err, lastErr, handle)
		if done {
			return derr
		}
		lastErr, ambiguous = v.err, ambiguous || v.landed
		wait, ok := time.Duration(0), false
		if v.retry {
			wait, ok = c.retry.next(attempt, v.hint, v.asked, waited, c.rand())
			if err != nil {
				wait, ok = c.untilDown(attempt, wait, ok)
			}
		}
		if !ok {
			if ambiguous && call.Reconcile != nil {
				if settled, rerr := reconcile(ctx, call, lastErr); settled {
					return rerr
				}
			}
			return c.giveUp(attempt, err != nil, lastErr)
		}
		if v.is429 && v.asked {
			c.lim.PauseUntil(c.clock.Now().Add(wait))
		}
		observeRetry(call)
		c.log.Debug().Str("method", call.Method).Str("url", call.URL).Int("attempt", attempt).
			Dur("wait", wait).Str("error", c.red.String(lastErr.Error())).Msg("retrying")
		if err := sleep(ctx, c.clock, wait); err != nil {
			return ctxErr(err, lastErr)
		}
		waited += wait
		if ambiguous && call.Reconcile != nil {
			if settled, rerr := reconcile(ctx, call, lastErr); settled {
				return rerr
			}
			ambiguous = false // not there: the repeat is no duplicate
		}
	}
}

// verdict is what an attempt that did not end its call came to.
type verdict struct {
	err    error         // what it failed with
	retry  bool          // whether it may be repeated
	landed bool          // whether it may have taken effect
	hint   time.Duration // the server's Retry-After, if asked
	asked  bool
	is429  bool
}

// judge reads one attempt's outcome: either the end of the call (done,
// with its error, nil on success: a 2xx answer handled, a permanent
// transport error, the context's end), or a verdict on a failure.
func (c *Client) judge(ctx context.Context, call Call, resp *http.Response, sent bool, err, lastErr error,
	handle func(*http.Response) error) (v verdict, done bool, _ error) {
	if err != nil {
		if ctx.Err() != nil {
			return v, true, ctxErr(ctx.Err(), lastErr)
		}
		var pe *permanentError
		if errors.As(err, &pe) || !retryableTransport(err) {
			return v, true, err
		}
		c.downSince.CompareAndSwap(0, c.clock.Now().UnixNano())
		return verdict{err: err, retry: true, landed: sent}, false, nil
	}
	c.downSince.Store(0) // an answer, whatever it says
	if resp.StatusCode >= 200 && resp.StatusCode < 300 || slices.Contains(call.Statuses, resp.StatusCode) {
		herr := handle(resp)
		var re *ReadError
		if herr == nil || !errors.As(herr, &re) {
			return v, true, herr
		}
		if ctx.Err() != nil {
			return v, true, ctxErr(ctx.Err(), herr)
		}
		return verdict{err: herr, retry: true, landed: true}, false, nil
	}
	v.err = c.apiError(resp)
	v.retry = sluice.RetryableStatus(resp.StatusCode) && !strings.EqualFold(header(resp.Header, "X-Should-Retry"), "false")
	v.hint, v.asked = RetryAfter(resp.Header, c.clock.Now())
	v.is429 = resp.StatusCode == http.StatusTooManyRequests
	return v, false, nil
}

// reconcile asks whether an attempt that may have taken effect did: it
// reports whether that settles the call, and with what error
// (ErrReconciled: it did). If the lookup fails, the attempt may have
// landed and the outcome is unknown: repeating the call could make a
// duplicate, so the caller must look again first.
func reconcile(ctx context.Context, call Call, lastErr error) (bool, error) {
	observeReconcile()
	done, rerr := call.Reconcile(ctx)
	switch {
	case rerr != nil:
		return true, fmt.Errorf("%w; reconciling: %w (%w)", lastErr, rerr, sluice.ErrUnsettled)
	case done:
		return true, ErrReconciled
	}
	return false, nil
}

// giveUp is the error of a call that is not tried again.
func (c *Client) giveUp(attempt int, transport bool, lastErr error) error {
	if transport {
		if down := c.unreachable(); down > 0 {
			return fmt.Errorf("%w: no answer for %s (--http-max-wait %s), last after %d attempts: %w",
				sluice.ErrUnreachable, down.Round(time.Millisecond), c.retry.MaxTotalWait, attempt, lastErr)
		}
	}
	if attempt > 1 {
		if _, isAPI := lastErr.(*sluice.APIError); !isAPI {
			return fmt.Errorf("after %d attempts: %w", attempt, lastErr)
		}
	}
	return lastErr
}

// observeRetry and observeReconcile tell the run's metrics, if any
// (internal/telemetry).
func observeRetry(call Call) {
	if s := telemetry.Get(); s != nil {
		if u, err := url.Parse(call.URL); err == nil {
			s.APIRetry(telemetry.Endpoint(u), call.Method)
		}
	}
}

func observeReconcile() {
	if s := telemetry.Get(); s != nil {
		s.Reconcile("call")
	}
}

// unreachable returns how long no call of this client got any answer
// (every connection failed), once that is MaxTotalWait or more; else 0. A
// single call gives up after MaxAttempts, and its caller tries again later;
// the time without any answer, across calls, is what says the endpoint is
// down for good (a closed port, a wrong host, the network gone).
func (c *Client) unreachable() time.Duration {
	since := c.downSince.Load()
	if since == 0 {
		return 0
	}
	if down := c.clock.Now().Sub(time.Unix(0, since)); down >= c.retry.MaxTotalWait {
		return down
	}
	return 0
}

// untilDown shapes the wait after an attempt that got no answer, so that
// an endpoint without any answer is reported unreachable when it has been
// so for MaxTotalWait (--http-max-wait), not one call's retries and the
// caller's later try after: never past that moment (at it, the call ends
// and says so), and up to it even where the call's own waits would stop
// sooner. MaxAttempts still ends the call.
func (c *Client) untilDown(attempt int, wait time.Duration, ok bool) (time.Duration, bool) {
	since := c.downSince.Load()
	if since == 0 || attempt >= c.retry.MaxAttempts {
		return wait, ok
	}
	left := c.retry.MaxTotalWait - c.clock.Now().Sub(time.Unix(0, since))
	switch {
	case left <= 0:
		return 0, false
	case !ok || wait > left:
		return left, true
	}
	return wait, ok
}

func ctxErr(err, last error) error {
	if last == nil {
		return err
	}
	return fmt.Errorf("%w (last error: %v)", err, last)
}

// permanentError is a failure to build a request (a bad URL, a chunk file
// that cannot be opened): not retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// attempt sends one attempt. sent reports whether the whole body was read
// by the transport (so the provider may have acted on it).
func (c *Client) attempt(ctx context.Context, call Call) (*http.Response, bool, error) {
	req, err := http.NewRequestWithContext(ctx, call.Method, call.URL, nil)
	if err != nil {
		return nil, false, &permanentError{err}
	}
	var tb *trackedBody
	if call.Body != nil {
		rc, n, err := call.Body()
		if err != nil {
			return nil, false, &permanentError{fmt.Errorf("open request body: %w", err)}
		}
		if n == 0 {
			rc.Close()
		} else {
			tb = &trackedBody{rc: rc, left: n, done: new(atomic.Bool)}
			req.Body, req.ContentLength = tb, n
			// For redirects (307/308) and the transport's own retry on a
			// stale connection: a fresh body, tracked with the same flag.
			req.GetBody = func() (io.ReadCloser, error) {
				rc, _, err := call.Body()
				if err != nil {
					return nil, err
				}
				return &trackedBody{rc: rc, left: n, done: tb.done}, nil
			}
		}
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	for k, vs := range call.Header {
		req.Header[k] = vs
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "sluice")
	}
	if c.auth != "" {
		req.Header.Set(c.authHdr, c.auth)
	}
	t0 := time.Now()
	resp, err := c.http.Do(req)
	if s := telemetry.Get(); s != nil {
		code := 0
		if err == nil {
			code = resp.StatusCode
		}
		s.APICall(telemetry.Endpoint(req.URL), req.Method, code, time.Since(t0))
	}
	sent := tb == nil || tb.done.Load()
	if err != nil {
		return nil, sent, c.redactErr(err)
	}
	resp.Body = &respBody{resp.Body}
	return resp, sent, nil
}

// redactErr keeps err's chain (for errors.Is/As) but redacts its text.
func (c *Client) redactErr(err error) error {
	if s := err.Error(); c.red.String(s) != s {
		return &redactedError{msg: c.red.String(s), err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// trackedBody notes when the transport has read a whole request body:
// from then on the provider may have acted on the request.
type trackedBody struct {
	rc   io.ReadCloser
	left int64
	done *atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err == io.EOF || b.left <= 0 {
		b.done.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { return b.rc.Close() }

type respBody struct{ rc io.ReadCloser }

func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = &ReadError{err}
	}
	return n, err
}

func (b *respBody) Close() error { return b.rc.Close() }

// apiError reads a non-2xx answer into a *sluice.APIError, credentials
// redacted.
func (c *Client) apiError(resp *http.Response) *sluice.APIError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 256<<10)) // let the connection be reused
	code, msg := c.errors(b)
	if msg == "" {
		msg = snippet(b, 512)
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	for _, h := range []string{"X-Request-Id", "Request-Id", "Apim-Request-Id", "Cf-Ray"} {
		if v := resp.Header.Get(h); v != "" {
			msg += " (" + h + " " + v + ")"
			break
		}
	}
	ra := resp.Header.Get("Retry-After")
	if ra == "" {
		if ms := header(resp.Header, "Retry-After-Ms"); ms != "" {
			if v, err := strconv.ParseFloat(ms, 64); err == nil && v > 0 && v < 1e12 {
				ra = strconv.FormatInt(int64(math.Ceil(v/1000)), 10)
			}
		}
	}
	return &sluice.APIError{
		Status:     resp.StatusCode,
		Code:       c.red.String(code),
		Message:    c.red.String(msg),
		RetryAfter: ra,
	}
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var ae *sluice.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}
