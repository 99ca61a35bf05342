package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/tracker"
)

// Notifications (docs/monitoring.md): a run with --notify records an event
// in the tracker's outbox (tracker/outbox.go) when the job ends, stops,
// fails or has a batch stuck, then POSTs it to each destination, signed
// the Standard Webhooks way with $SLUICE_WEBHOOK_SECRET. Delivery is
// retried with backoff (Retry-After honoured) while the run lives and
// --notify-wait at its end; what is left is sent by the next run with the
// same destination. The event id (webhook-id) is stable across attempts,
// runs and workers, so a receiver dedupes the rare second delivery.

// Event types.
const (
	evDone     = "job.done"
	evFailures = "job.finished_with_failures"
	evStopped  = "job.stopped"
	evFailed   = "job.failed"
	evStuck    = "batch.stuck"
)

const (
	// notifyMaxAttempts bounds the attempts of one event to one
	// destination, across runs; then it is marked failed and logged.
	notifyMaxAttempts = 8
	notifyMaxBackoff  = 5 * time.Minute
	// notifyMaxRetryAfter bounds a receiver's Retry-After.
	notifyMaxRetryAfter = time.Hour
)

type notifyFlags struct {
	urls    []string
	timeout time.Duration
	wait    time.Duration
}

func (n *notifyFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringArrayVar(&n.urls, "notify", nil, "POST a JSON event to this URL when the job is done, finishes with failures, stops (deadline, --once, spend cap, signal), fails, or has a batch stuck past --stuck-after; repeatable, also $SLUICE_NOTIFY (comma- or space-separated). Signed the Standard Webhooks way with $SLUICE_WEBHOOK_SECRET (whsec_<base64>). A slack+https:// URL gets a Slack-compatible {\"text\": ...} body instead (docs/monitoring.md)")
	fs.DurationVar(&n.timeout, "notify-timeout", 10*time.Second, "how long one notification attempt may take")
	fs.DurationVar(&n.wait, "notify-wait", time.Minute, "how long the run waits at its end for its notifications to be delivered (retried with backoff); what is left is sent by the next run")
}

// notifyDest is one destination: the URL to POST to, the body format,
// and key, the digest the outbox records instead of the URL.
type notifyDest struct {
	url, format, key string
}

// dests reads --notify and $SLUICE_NOTIFY.
func (n *notifyFlags) dests() ([]notifyDest, error) {
	raw := append([]string(nil), n.urls...)
	raw = append(raw, strings.FieldsFunc(os.Getenv("SLUICE_NOTIFY"), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })...)
	var out []notifyDest
	seen := map[string]bool{}
	for _, r := range raw {
		r = strings.TrimSpace(r)
		if r == "" || seen[r] {
			continue
		}
		seen[r] = true
		d := notifyDest{url: r, format: "json"}
		if rest, ok := strings.CutPrefix(r, "slack+"); ok {
			d.url, d.format = rest, "slack"
		}
		u, err := url.Parse(d.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageErr("--notify %s: want an http:// or https:// URL (or slack+https://)", redactURL(d.url))
		}
		sum := sha256.Sum256([]byte(r))
		d.key = hex.EncodeToString(sum[:])
		out = append(out, d)
	}
	if n.timeout <= 0 || n.wait < 0 {
		return nil, usageErr("--notify-timeout must be positive and --notify-wait not negative")
	}
	return out, nil
}

// redactURL keeps a URL's scheme and host: its path, query and user info
// may hold a token (a Slack hook's path is its secret).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "<url>"
	}
	if u.Path == "" && u.RawQuery == "" && u.User == nil {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// webhookSigner reads $SLUICE_WEBHOOK_SECRET; nil when it is unset.
func webhookSigner() (*standardwebhooks.Webhook, error) {
	s := os.Getenv("SLUICE_WEBHOOK_SECRET")
	if s == "" {
		return nil, nil
	}
	if !strings.HasPrefix(s, "whsec_") {
		return nil, usageErr("SLUICE_WEBHOOK_SECRET: want whsec_ followed by the base64 of the key")
	}
	wh, err := standardwebhooks.NewWebhook(s)
	if err != nil {
		return nil, usageErr("SLUICE_WEBHOOK_SECRET: not base64 after whsec_") // never the value
	}
	return wh, nil
}

// notifier records and delivers one run's events.
type notifier struct {
	ob      tracker.Outbox
	dests   []notifyDest
	keys    []string
	byKey   map[string]notifyDest
	wh      *standardwebhooks.Webhook
	client  *http.Client
	owner   string
	log     zerolog.Logger
	timeout time.Duration
	wait    time.Duration
	job     *sluice.Job

	stuck   chan stuckBatch
	mu      sync.Mutex
	seen    map[string]bool // stuck batches already handed over
	wake    chan struct{}
	quit    chan struct{}
	stopped chan struct{}
}

type stuckBatch struct {
	chunk   int64
	attempt int
	batch   string
	reason  string
}

// newNotifier returns nil when no destination is set.
func newNotifier(f *notifyFlags, db tracker.Backend, job *sluice.Job, log zerolog.Logger) (*notifier, error) {
	dests, err := f.dests()
	if err != nil || len(dests) == 0 {
		return nil, err
	}
	wh, err := webhookSigner()
	if err != nil {
		return nil, err
	}
	ob, ok := db.(tracker.Outbox)
	if !ok {
		return nil, fmt.Errorf("--notify: the tracker %s keeps no outbox", db.Describe())
	}
	if wh == nil {
		log.Warn().Msg("--notify: SLUICE_WEBHOOK_SECRET is not set; events are sent unsigned")
	}
	n := &notifier{ob: ob, dests: dests, byKey: map[string]notifyDest{}, wh: wh, owner: randomID("w_"),
		client: &http.Client{Timeout: f.timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		log:    log, timeout: f.timeout, wait: f.wait, job: job, stuck: make(chan stuckBatch, 64),
		seen: map[string]bool{}, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	for _, d := range dests {
		n.keys = append(n.keys, d.key)
		n.byKey[d.key] = d
	}
	return n, nil
}

func randomID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// stableID is the id of an event that is the same event whoever records
// it and however often: the job done, a batch stuck, a deadline reached.
func stableID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return "evt_" + hex.EncodeToString(sum[:12])
}

// start delivers, in the background while the run lives, what earlier
// runs left in the outbox and the stuck batches the dispatcher reports.
func (n *notifier) start() {
	if n == nil {
		return
	}
	// A delivery in flight when the run ends is let finish (it takes at
	// most --notify-timeout): cut off, it would cost an attempt.
	ctx := context.Background()
	n.quit = make(chan struct{})
	go func() {
		defer close(n.stopped)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			n.deliverDue(ctx, n.quit)
			select {
			case <-n.quit:
				return
			case s := <-n.stuck:
				n.recordStuck(ctx, s)
			case <-n.wake:
			case <-t.C:
			}
		}
	}()
}

// onTick is the dispatcher's OnTick: it hands over batches newly found
// stuck, without blocking.
func (n *notifier) onTick(chunks []*sluice.Chunk) {
	if n == nil {
		return
	}
	for _, c := range chunks {
		if c.Stuck == "" || c.BatchID == "" || c.Stuck == sluice.FallbackReason {
			continue
		}
		key := strconv.FormatInt(c.ID, 10) + "/" + c.BatchID
		n.mu.Lock()
		seen := n.seen[key]
		n.seen[key] = true
		n.mu.Unlock()
		if seen {
			continue
		}
		select {
		case n.stuck <- stuckBatch{chunk: c.ID, attempt: c.Attempt, batch: c.BatchID, reason: c.Stuck}:
		default: // full: the next tick's chunks bring it again
			n.mu.Lock()
			delete(n.seen, key)
			n.mu.Unlock()
		}
	}
}

func (n *notifier) recordStuck(ctx context.Context, s stuckBatch) {
	n.record(ctx, stableID(n.job.ID, evStuck, s.batch), evStuck, map[string]any{
		"batch": map[string]any{"chunk": s.chunk, "attempt": s.attempt, "batch_id": s.batch, "reason": s.reason}},
		fmt.Sprintf("batch %s of job %s is stuck (%s); sluice cancelled it and retries its requests", s.batch, n.job.ID, s.reason))
}

// record puts one event in the outbox for every destination.
func (n *notifier) record(ctx context.Context, id, typ string, data map[string]any, text string) {
	now := time.Now().UTC()
	data["job"] = n.job.ID
	data["provider"] = n.job.Provider
	body, err := json.Marshal(map[string]any{"type": typ, "timestamp": now.Format(time.RFC3339Nano), "data": data})
	if err != nil {
		n.log.Error().Err(err).Msg("notification not recorded")
		return
	}
	slack, _ := json.Marshal(map[string]string{"text": "sluice: " + text})
	for _, d := range n.dests {
		b := body
		if d.format == "slack" {
			b = slack
		}
		ok, err := n.ob.RecordNotification(ctx, tracker.Notification{ID: id, Dest: d.key, Job: n.job.ID, Type: typ, Body: b, CreatedAt: now})
		if err != nil {
			n.log.Error().Err(err).Str("event", id).Msg("notification not recorded")
		} else if ok {
			n.log.Debug().Str("event", id).Str("type", typ).Str("to", redactURL(d.url)).Msg("notification recorded")
		}
	}
}

// deliverDue sends every event due now, until quit is closed (nil: never).
func (n *notifier) deliverDue(ctx context.Context, quit <-chan struct{}) {
	for ctx.Err() == nil {
		select {
		case <-quit:
			return
		default:
		}
		row, err := n.ob.ClaimNotification(ctx, n.keys, n.owner, n.timeout+2*time.Second)
		if err != nil {
			n.log.Warn().Err(err).Msg("notifications: outbox not readable")
			return
		}
		if row == nil {
			return
		}
		n.deliver(ctx, row)
	}
}

func (n *notifier) deliver(ctx context.Context, row *tracker.Notification) {
	d := n.byKey[row.Dest]
	log := n.log.With().Str("event", row.ID).Str("type", row.Type).Str("to", redactURL(d.url)).Int("attempt", row.Attempts).Logger()
	hint, permanent, err := n.post(ctx, d, row)
	state, next, msg := tracker.NoteDelivered, time.Time{}, ""
	switch {
	case err == nil:
		log.Info().Msg("notification delivered")
	case permanent || row.Attempts >= notifyMaxAttempts:
		state, msg = tracker.NoteFailed, err.Error()
		log.Error().Str("error", msg).Msg("notification not delivered; giving up")
	default:
		wait := min(time.Second<<min(row.Attempts-1, 20), notifyMaxBackoff)
		wait = max(wait, min(hint, notifyMaxRetryAfter))
		state, next, msg = tracker.NotePending, time.Now().Add(wait), err.Error()
		log.Warn().Str("error", msg).Dur("retry_in", wait).Msg("notification not delivered; will retry")
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := n.ob.SettleNotification(sctx, row, n.owner, state, next, msg); err != nil {
		log.Warn().Err(err).Msg("notification outcome not recorded")
	}
}

// post sends one attempt. hint is the receiver's Retry-After; permanent
// says another attempt would get the same answer.
func (n *notifier) post(ctx context.Context, d notifyDest, row *tracker.Notification) (hint time.Duration, permanent bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(row.Body))
	if err != nil {
		return 0, true, errors.New("bad URL " + redactURL(d.url))
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice")
	req.Header.Set(standardwebhooks.HeaderWebhookID, row.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	if n.wh != nil {
		sig, err := n.wh.Sign(row.ID, now, row.Body)
		if err != nil {
			return 0, true, err
		}
		req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("POST %s: %w", redactURL(d.url), ue.Err)
		}
		return 0, false, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, false, nil
	}
	hint, _ = httpx.RetryAfter(resp.Header, time.Now())
	err = fmt.Errorf("POST %s: HTTP %d", redactURL(d.url), resp.StatusCode)
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return hint, false, err
	}
	return hint, resp.StatusCode < 500, err // a redirect (not followed) or another 4xx: the same again
}

// finish records the run's end event (typ "" for none), then delivers
// what is due until nothing is left or --notify-wait has passed.
func (n *notifier) finish(typ, id string, data map[string]any, text string) {
	if n == nil {
		return
	}
	close(n.quit)
	<-n.stopped
	ctx, cancel := context.WithTimeout(context.Background(), n.wait+n.timeout+5*time.Second)
	defer cancel()
	for {
		select {
		case s := <-n.stuck:
			n.recordStuck(ctx, s)
			continue
		default:
		}
		break
	}
	if typ != "" {
		n.record(ctx, id, typ, data, text)
	}
	end := time.Now().Add(n.wait)
	for {
		n.deliverDue(ctx, nil)
		left, at, err := n.ob.NotificationsDue(ctx, n.keys)
		if err != nil || left == 0 {
			return
		}
		if at.After(end) || ctx.Err() != nil {
			n.log.Warn().Int("events", left).Msg("notifications not delivered yet: the next run with the same --notify sends them")
			return
		}
		t := time.NewTimer(max(time.Until(at), 10*time.Millisecond))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// jobEventData is what every job event says of the job.
func jobEventData(ctx context.Context, db tracker.Backend, job *sluice.Job, exit int) (map[string]any, string) {
	data := map[string]any{"exit_code": exit, "output": job.Output}
	states, err := db.RequestStates(ctx, job.ID)
	summary := ""
	if err == nil {
		counts := map[string]int64{}
		for s, k := range states {
			counts[string(s)] = k
		}
		data["requests"] = map[string]any{"total": job.Requests, "rejected": job.Rejected, "by_state": counts}
		summary = fmt.Sprintf("%d requests: %d succeeded, %d failed", job.Requests, states[sluice.RequestSucceeded], states[sluice.RequestFailed])
	}
	if chunks, err := db.Chunks(ctx, job.ID); err == nil {
		if m := jobMoney(ctx, db, job, chunks); m != nil {
			data["spend_usd"], data["max_cost_usd"] = m.ActualUSD, m.CapUSD
		}
	}
	return data, summary
}

// runEnd is how a run ended, for its event.
type runEnd struct {
	typ, id, reason string
}

// notifyEnd records and delivers the event of a run that ended with err.
func notifyEnd(n *notifier, db tracker.Backend, job *sluice.Job, end runEnd, err error, cancelled bool) {
	if n == nil {
		return
	}
	exit := 0
	if err != nil && end.typ == "" {
		switch {
		case cancelled && errors.Is(err, context.Canceled):
			end = runEnd{typ: evStopped, id: randomID("evt_"), reason: "signal"}
		case errors.Is(err, context.Canceled):
			end = runEnd{}
		case codeOf(err) == exitStopped:
			end = runEnd{typ: evStopped, id: randomID("evt_"), reason: "signal"}
		default:
			end = runEnd{typ: evFailed, id: randomID("evt_")}
		}
	}
	switch end.typ {
	case evStopped:
		exit = exitStopped
	case evFailures:
		exit = exitFailures
	case evFailed:
		exit = codeOf(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var data map[string]any
	text := ""
	if end.typ != "" {
		var summary string
		data, summary = jobEventData(ctx, db, job, exit)
		text = fmt.Sprintf("job %s %s", job.ID, strings.TrimPrefix(end.typ, "job."))
		if end.reason != "" {
			data["reason"] = end.reason
			text += " (" + end.reason + ")"
		}
		if end.typ == evFailed && err != nil {
			data["error"] = err.Error()
			text += ": " + err.Error()
		} else if summary != "" {
			text += ": " + summary
		}
	}
	n.finish(end.typ, end.id, data, text)
}

// codeOf is the exit code err makes.
func codeOf(err error) int { return exitCode(err) }
