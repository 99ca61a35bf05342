package main

// End-to-end tests of --notify (docs/monitoring.md): events POSTed to a
// real HTTP receiver on 127.0.0.1 that verifies each signature with the
// Standard Webhooks library, through the real binary, with kills between
// an event's recording and its delivery.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// delivery is one POST the receiver got.
type delivery struct {
	id, ts   string
	body     []byte
	verified error
	at       time.Time
}

// event is a JSON event's body.
type event struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

func (d delivery) event(t *testing.T) event {
	t.Helper()
	var e event
	if err := json.Unmarshal(d.body, &e); err != nil {
		t.Fatalf("event %s: %v\n%s", d.id, err, d.body)
	}
	return e
}

// receiver is a webhook endpoint: it verifies every delivery with the
// Standard Webhooks library and answers with answer(n) (n counts from 1;
// nil: 200). The first hold deliveries are held until the sender goes
// away.
type receiver struct {
	srv    *httptest.Server
	wh     *standardwebhooks.Webhook
	hold   atomic.Int32
	answer func(n int) (int, http.Header)
	delay  time.Duration // before each answer (a slow receiver)

	mu  sync.Mutex
	got []delivery
}

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// newReceiver starts a receiver of a fresh secret, returned with it.
func newReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	secret := newSecret(t)
	return startReceiver(t, secret), secret
}

func startReceiver(t *testing.T, secret string) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{wh: wh}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		d := delivery{id: req.Header.Get("webhook-id"), ts: req.Header.Get("webhook-timestamp"), body: body,
			verified: r.wh.Verify(body, req.Header), at: time.Now()}
		r.mu.Lock()
		r.got = append(r.got, d)
		n := len(r.got)
		r.mu.Unlock()
		if r.hold.Add(-1) >= 0 {
			<-req.Context().Done() // the sender is gone (killed)
			return
		}
		select {
		case <-time.After(r.delay):
		case <-req.Context().Done():
		}
		code, h := http.StatusOK, http.Header(nil)
		if r.answer != nil {
			code, h = r.answer(n)
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// url is the receiver's address with a path and query that stand for a
// token (a Slack hook's path is its secret): no log may show them.
func (r *receiver) url() string { return r.srv.URL + "/hooks/T0KEN-PATH?token=T0KEN-QUERY" }

func checkNoSecrets(t *testing.T, log, secret string) {
	t.Helper()
	for _, s := range []string{"T0KEN-PATH", "T0KEN-QUERY", strings.TrimPrefix(secret, "whsec_")} {
		if strings.Contains(log, s) {
			t.Errorf("the log shows a secret (%q):\n%s", s, log)
		}
	}
}

// outbox reads the notification rows of the tracker: PostgreSQL's at dsn,
// else the state directory's SQLite.
func outbox(t *testing.T, dir string, dsn ...string) []tracker.Notification {
	t.Helper()
	var db interface {
		tracker.Outbox
		Close() error
	}
	var err error
	if len(dsn) > 0 && dsn[0] != "" {
		db, err = tracker.OpenPostgres(context.Background(), dsn[0], filepath.Join(dir, "state"))
	} else {
		db, err = tracker.Open(context.Background(), filepath.Join(dir, "state"))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Notifications(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// failFirst is a receiver's answer: 503 with h to the first delivery,
// then ok.
func failFirst(h http.Header, ok int) func(n int) (int, http.Header) {
	return func(n int) (int, http.Header) {
		if n == 1 {
			return http.StatusServiceUnavailable, h
		}
		return ok, nil
	}
}

// runDelivered runs sluice with args, which must exit 0 with every id of
// ids in out, and returns the run and what rec then holds: want
// deliveries (why says why), each with its signature verified.
func runDelivered(t *testing.T, rec *receiver, env, args []string, out string, ids []string, what string, want int, why string) ([]delivery, result) {
	t.Helper()
	r := runSluice(t, env, args...)
	if r.code != 0 {
		t.Fatalf("%s: exit %d\n%s", what, r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	got := rec.deliveries()
	if len(got) != want {
		t.Fatalf("receiver got %d deliveries, want %d%s", len(got), want, why)
	}
	for _, d := range got {
		if d.verified != nil {
			t.Fatalf("delivery %s: signature: %v", d.id, d.verified)
		}
	}
	return got, r
}

// TestNotifyDoneSignedOnceAndSlack: a job run to the end with two
// destinations (one Standard Webhooks JSON, one slack+) gets exactly one
// job.done each, the JSON one verified by the Standard Webhooks library
// with the counts of the job; running the same command again sends
// nothing more; neither the secret nor the URL's token is logged.
func TestNotifyDoneSignedOnceAndSlack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := newSecret(t)
	rec, slack := startReceiver(t, secret), startReceiver(t, secret)
	in, ids := writeInput(t, dir, 40)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "SLUICE_WEBHOOK_SECRET="+secret, "SLUICE_NOTIFY=slack+"+slack.url())
	args := []string{"run", in, "--out", out, "--provider", "local", "--notify", rec.url(), "--log-level", "debug"}
	got, r := runDelivered(t, rec, env, args, out, ids, "run", 1, "")
	e := got[0].event(t)
	byState := e.Data["requests"].(map[string]any)["by_state"].(map[string]any)
	if e.Type != "job.done" || byState["succeeded"] != float64(len(ids)) || e.Data["exit_code"] != float64(0) || e.Data["output"] != out {
		t.Fatalf("event %s", got[0].body)
	}
	sl := slack.deliveries()
	if len(sl) != 1 || !strings.HasPrefix(string(sl[0].body), `{"text":"sluice: job `) || !strings.Contains(string(sl[0].body), "40 succeeded") {
		t.Fatalf("slack deliveries: %+v", sl)
	}
	if sl[0].id != got[0].id {
		t.Errorf("one event has two ids: %s and %s", got[0].id, sl[0].id)
	}
	checkNoSecrets(t, r.stderr+r.stdout, secret)

	r = runSluice(t, env, args...)
	if r.code != 0 {
		t.Fatalf("second run: exit %d\n%s", r.code, r.stderr)
	}
	if n, m := len(rec.deliveries()), len(slack.deliveries()); n != 1 || m != 1 {
		t.Fatalf("the second run of a done job sent the event again: %d and %d deliveries", n, m)
	}
}

// TestNotifyKilledMidDeliveryResentWithTheSameID: the receiver holds the
// first delivery of job.done and sluice is SIGKILLed meanwhile; the next
// run sends the event again with the same webhook-id and body (the
// receiver dedupes on it), signed; the outbox records it delivered after
// two attempts, and a third run sends nothing. On SQLite and on
// PostgreSQL (--db).
func TestNotifyKilledMidDeliveryResentWithTheSameID(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); testKilledMidDelivery(t, "") })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); testKilledMidDelivery(t, testsrv.Postgres(t)) })
}

func testKilledMidDelivery(t *testing.T, dsn string) {
	dir := t.TempDir()
	rec, secret := newReceiver(t)
	rec.hold.Store(1)
	in, ids := writeInput(t, dir, 30)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "SLUICE_WEBHOOK_SECRET="+secret, "SLUICE_DB="+dsn)
	args := []string{"run", in, "--out", out, "--provider", "local", "--notify", rec.url(), "--notify-timeout", "2s"}
	killWhen(t, sluiceCmd(env, args...), "delivery held", func() bool { return len(rec.deliveries()) > 0 })
	if rows := outbox(t, dir, dsn); len(rows) != 1 || rows[0].State != tracker.NoteSending {
		t.Fatalf("after the kill the outbox holds %+v, want one event in sending", rows)
	}

	got, _ := runDelivered(t, rec, env, args, out, ids, "run after the kill", 2, " (the held one and its resend)")
	if got[0].id != got[1].id || string(got[0].body) != string(got[1].body) || got[0].event(t).Type != "job.done" {
		t.Fatalf("the resend is another event: %s %s / %s %s", got[0].id, got[0].body, got[1].id, got[1].body)
	}
	rows := outbox(t, dir, dsn)
	if len(rows) != 1 || rows[0].State != tracker.NoteDelivered || rows[0].Attempts != 2 || rows[0].ID != got[0].id {
		t.Fatalf("outbox: %+v", rows)
	}
	if r := runSluice(t, env, args...); r.code != 0 || len(rec.deliveries()) != 2 {
		t.Fatalf("third run: exit %d, %d deliveries (want 0, 2)\n%s", r.code, len(rec.deliveries()), r.stderr)
	}
}

// TestNotifyRetriesHonouringRetryAfter: every batch fails validation
// (exit 4), and the receiver answers the first attempt 503 with
// Retry-After: 2; the run retries no sooner than that, with the same id,
// and the event is job.finished_with_failures.
func TestNotifyRetriesHonouringRetryAfter(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--validation-fail-rate", "1")
	dir := t.TempDir()
	rec, secret := newReceiver(t)
	rec.answer = failFirst(http.Header{"Retry-After": {"2"}}, http.StatusNoContent)
	in, _ := writeInput(t, dir, 20)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1", "SLUICE_WEBHOOK_SECRET="+secret)
	r := runSluice(t, env, "run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai", "--max-attempts", "1",
		"--poll-interval", "50ms", "--max-poll-interval", "100ms", "--rate", "-1", "--notify", rec.url())
	if r.code != exitFailures {
		t.Fatalf("run: exit %d, want %d\n%s", r.code, exitFailures, r.stderr)
	}
	got := rec.deliveries()
	if len(got) != 2 || got[0].id != got[1].id {
		t.Fatalf("deliveries %+v, want the same event twice", got)
	}
	if gap := got[1].at.Sub(got[0].at); gap < 2*time.Second {
		t.Errorf("retried %v after a 503 with Retry-After: 2", gap)
	}
	if e := got[1].event(t); e.Type != "job.finished_with_failures" || e.Data["exit_code"] != float64(exitFailures) {
		t.Fatalf("event %s", got[1].body)
	}
	checkNoSecrets(t, r.stderr, secret)
}

// TestNotifyStoppedAndStuck: every batch stays in validating at the
// emulator. A run with --once stops with work left (job.stopped, reason
// once); one with --deadline stops at it (job.stopped, reason deadline);
// one with --stuck-after sends one batch.stuck for each of the job's
// three batches, and job.finished_with_failures once they are cancelled.
func TestNotifyStoppedAndStuck(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--stuck-rate", "1", "--stuck-phase", "validating")
	dir := t.TempDir()
	rec := startReceiver(t, newSecret(t))
	in, _ := writeInput(t, dir, 10) // three models: three batches
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1", "SLUICE_WEBHOOK_SECRET="+newSecret(t))
	args := []string{"run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai", "--rate", "-1",
		"--max-attempts", "1", "--poll-interval", "50ms", "--max-poll-interval", "100ms", "--notify", rec.url()}
	for i, c := range []struct {
		flags  []string
		code   int
		events map[string]int
		reason string
	}{
		{[]string{"--once"}, exitStopped, map[string]int{"job.stopped": 1}, "once"},
		{[]string{"--deadline", "1s"}, exitStopped, map[string]int{"job.stopped": 1}, "deadline"},
		{[]string{"--stuck-after", "300ms"}, exitFailures, map[string]int{"batch.stuck": 3, "job.finished_with_failures": 1}, ""},
	} {
		before := len(rec.deliveries())
		r := runSluice(t, env, append(args, c.flags...)...)
		if r.code != c.code {
			t.Fatalf("%v: exit %d, want %d\n%s", c.flags, r.code, c.code, r.stderr)
		}
		types := map[string]int{}
		ids := map[string]bool{}
		for _, d := range rec.deliveries()[before:] {
			e := d.event(t)
			types[e.Type]++
			ids[d.id] = true
			switch e.Type {
			case "job.stopped":
				if e.Data["reason"] != c.reason || e.Data["exit_code"] != float64(exitStopped) {
					t.Errorf("%v: event %s", c.flags, d.body)
				}
			case "batch.stuck":
				if b := e.Data["batch"].(map[string]any); !strings.Contains(b["reason"].(string), "validating") || b["batch_id"] == "" {
					t.Errorf("stuck event %s", d.body)
				}
			}
			// The receiver has another secret: its check fails, as it must.
			if d.verified == nil {
				t.Errorf("a signature made with another secret verified")
			}
		}
		if len(types) != len(c.events) || len(ids) != len(rec.deliveries())-before {
			t.Errorf("run %d %v: events %v (%d ids), want %v", i, c.flags, types, len(ids), c.events)
		}
		for k, n := range c.events {
			if types[k] != n {
				t.Errorf("run %d %v: %d %s, want %d", i, c.flags, types[k], k, n)
			}
		}
	}
}

// TestNotifyWorkersSendOnce: a --once run leaves its job.stopped event
// undelivered (the receiver answered 503, and --notify-wait 0 let it go);
// then two --join workers with the same --notify drive the job to the
// end, both looking for due events at once while the receiver takes a
// second to answer. The receiver gets the stopped event once more (one
// worker's claim excludes the other's) and job.done exactly once.
func TestNotifyWorkersSendOnce(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--batch-time", "2s")
	dir := t.TempDir()
	rec, secret := newReceiver(t)
	rec.answer = failFirst(nil, http.StatusOK)
	rec.delay = time.Second // a slow receiver: a second claim would overlap the first's send
	in, ids := writeInput(t, dir, 2000)
	out := filepath.Join(dir, "o.jsonl")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1", "SLUICE_WEBHOOK_SECRET="+secret)
	args := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "500",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms", "--log-format", "json", "--notify", rec.url()}
	if r := runSluice(t, env, append(args, "--once", "--notify-wait", "0s")...); r.code != exitStopped {
		t.Fatalf("--once: exit %d\n%s", r.code, r.stderr)
	}
	if rows := outbox(t, dir); len(rows) != 1 || rows[0].State != tracker.NotePending || rows[0].Type != "job.stopped" {
		t.Fatalf("after --once the outbox holds %+v, want job.stopped pending", rows)
	}
	workers := append(args, "--join", "--lease-ttl", "900ms")
	a := startWorkerProc(t, env, workers...)
	b := startWorkerProc(t, env, workers...)
	if _, merged := waitWorkers(t, []*workerProc{a, b}, 90*time.Second); merged != 1 {
		t.Fatalf("%d workers merged, want 1", merged)
	}
	checkOutput(t, out, ids)
	types := map[string]int{}
	for _, d := range rec.deliveries() {
		if d.verified != nil {
			t.Errorf("delivery %s: %v", d.id, d.verified)
		}
		types[d.event(t).Type]++
	}
	if types["job.stopped"] != 2 || types["job.done"] != 1 || len(types) != 2 {
		t.Fatalf("deliveries by type %v, want job.stopped twice (a 503, then delivered once) and job.done once\nA:\n%s\nB:\n%s",
			types, a.stderr.String(), b.stderr.String())
	}
	for _, r := range outbox(t, dir) {
		if r.State != tracker.NoteDelivered {
			t.Errorf("outbox row %s %s: %s", r.ID, r.Type, r.State)
		}
	}
}

// TestNotifyFailed: a run whose provider endpoint refuses every
// connection fails (exit 1) and says job.failed with the error; the
// event still reaches the receiver, which is up.
func TestNotifyFailed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec, secret := newReceiver(t)
	in, _ := writeInput(t, dir, 6)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "SLUICE_WEBHOOK_SECRET="+secret)
	r := runSluiceFor(t, 90e9, env, "run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai", "--rate", "-1",
		"--http-max-wait", "1s", "--base-url", "http://"+refusingAddr(t)+"/v1", "--notify", rec.url())
	if r.code != exitError {
		t.Fatalf("run against a dead endpoint: exit %d, want 1\n%s", r.code, r.stderr)
	}
	got := rec.deliveries()
	if len(got) != 1 || got[0].verified != nil {
		t.Fatalf("deliveries: %+v", got)
	}
	e := got[0].event(t)
	if errText, _ := e.Data["error"].(string); e.Type != "job.failed" || e.Data["exit_code"] != float64(exitError) || errText == "" {
		t.Fatalf("event %s", got[0].body)
	}
	checkNoSecrets(t, r.stderr, secret)
}

// TestNotifyBadFlags: a --notify that is not an http(s) URL and a secret
// not in the whsec_ form are bad usage (exit 2), named without the value.
func TestNotifyBadFlags(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 3)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--notify", "ftp://h/x"}, "--notify"},
		{[]string{"SLUICE_WEBHOOK_SECRET=hunter2"}, []string{"--notify", "http://127.0.0.1:1/x"}, "whsec_"},
	} {
		r := runSluice(t, append(stateEnv(dir), c.env...), append([]string{"run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "local"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "hunter2") {
			t.Errorf("%v %v: exit %d %q", c.env, c.args, r.code, r.stderr)
		}
	}
}
