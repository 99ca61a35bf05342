package main

// End-to-end tests of --metrics-addr and --metrics-file (docs/monitoring.md)
// through the real binary against the emulator.

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// lintMetrics checks text the way `promtool check metrics` does (promlint
// is the linter promtool runs), and with promtool itself when it is
// installed (go install github.com/prometheus/prometheus/cmd/promtool).
func lintMetrics(t *testing.T, what string, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, text)
	}
	for _, p := range problems {
		t.Errorf("%s: promlint: %s: %s", what, p.Metric, p.Text)
	}
	if tool := promtoolPath(); tool != "" {
		cmd := exec.Command(tool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: promtool check metrics: %v\n%s", what, err, out)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return mfs
}

func promtoolPath() string {
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "promtool")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// value is the value of the series of name whose labels include want
// (a gauge's, a counter's, or a histogram's count), summed over the
// matching series; found false when none matches.
func value(mfs map[string]*dto.MetricFamily, name string, want ...string) (v float64, found bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		found = true
		switch {
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, found
}

func mustValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	v, ok := value(mfs, name, want...)
	if !ok {
		t.Fatalf("no %s%v", name, want)
	}
	return v
}

// umask is the process's file mode creation mask (children inherit it).
func umask(t *testing.T) os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Umask:\s*([0-7]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no Umask in /proc/self/status")
	}
	u, _ := strconv.ParseUint(string(m[1]), 8, 32)
	return os.FileMode(u)
}

// TestMetricsServedAndWritten: a job against the emulator (batches that
// take a moment, HTTP faults that make retries). First --once stops with
// batches live: --metrics-file says exit code 3 and the live batches.
// Then a run with --metrics-addr 127.0.0.1:0 is scraped while batches are
// live; its metrics and its file after the run pass promlint (and
// promtool, when installed), and their figures are the job's: requests
// succeeded equal the output's lines, batches done equal the batches the
// emulator created, API calls and retries counted, spend and tokens.
func TestMetricsServedAndWritten(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := emulatorJob(t, 300, "out.jsonl", "--batch-time", "1500ms", "--http-fault-rate", "0.15", "--retry-after", "20ms")
	file := filepath.Join(dir, "textfile", "sluice.prom")
	os.Mkdir(filepath.Dir(file), 0o755)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "50", "--rate", "-1",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms", "--metrics-file", file, "--log-format", "json"}

	if r := runSluice(t, env, append(args, "--once")...); r.code != exitStopped {
		t.Fatalf("--once: exit %d, want %d\n%s", r.code, exitStopped, r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	mfs := lintMetrics(t, "file after --once", b)
	if code := mustValue(t, mfs, "sluice_run_exit_code"); code != exitStopped {
		t.Errorf("file after --once: sluice_run_exit_code %v", code)
	}
	if live := mustValue(t, mfs, "sluice_batches_live"); live < 1 {
		t.Errorf("file after --once: %v batches live", live)
	}
	createdByOnce := emu.stats(t)["batches_created"]
	if v := mustValue(t, mfs, "sluice_api_requests_total", "endpoint", "/v1/batches", "method", "POST", "code", "200"); v != float64(createdByOnce) {
		t.Errorf("file after --once: %v batches created, the emulator says %d", v, createdByOnce)
	}

	w := startWorkerProc(t, env, append(args, "--metrics-addr", "127.0.0.1:0")...)
	se := w.stderr
	addrRE := regexp.MustCompile(`"metrics_addr":"(127\.0\.0\.1:\d+)"`)
	var scraped []byte
	for deadline := time.Now().Add(time.Minute); scraped == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("no scrape with batches live within a minute:\n%s", se.String())
		}
		select {
		case <-w.done:
			t.Fatalf("the run ended (exit %d) before a scrape saw batches live:\n%s", w.code, se.String())
		case <-time.After(20 * time.Millisecond):
		}
		m := addrRE.FindStringSubmatch(se.String())
		if m == nil {
			continue
		}
		resp, err := http.Get("http://" + m[1] + "/metrics")
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") == "" {
			t.Fatalf("scrape: %s", resp.Status)
		}
		if v, _ := value(lintMetrics(t, "scrape", body), "sluice_batches_live"); v > 0 {
			scraped = body
		}
	}
	live := lintMetrics(t, "scrape", scraped)
	if v := mustValue(t, live, "sluice_requests_planned"); v != float64(len(ids)) {
		t.Errorf("scrape: sluice_requests_planned %v, want %d", v, len(ids))
	}
	if _, ok := value(live, "sluice_run_exit_code"); ok {
		t.Error("a live run reports an exit code")
	}
	if <-w.done; w.code != 0 {
		t.Fatalf("run: exit %d\n%s", w.code, se.String())
	}
	checkOutput(t, out, ids)

	b, err = os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	mfs = lintMetrics(t, "file", b)
	st := emu.stats(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_requests", []string{"state", "succeeded"}, float64(len(ids))},
		{"sluice_requests", []string{"state", "failed"}, 0},
		{"sluice_requests", []string{"state", "pending"}, 0},
		{"sluice_batches", []string{"state", "done"}, float64(st["batches_created"])},
		{"sluice_batches_live", nil, 0},
		{"sluice_run_exit_code", nil, 0},
		// Counters count this run's calls (a new process starts at 0).
		{"sluice_api_requests_total", []string{"endpoint", "/v1/batches", "method", "POST", "code", "200"}, float64(st["batches_created"] - createdByOnce)},
		{"sluice_api_request_duration_seconds", []string{"endpoint", "/v1/batches/{id}", "method", "GET"}, -1},
		{"sluice_api_retries_total", nil, -1},
		{"sluice_input_tokens_estimated", nil, -1},
		{"sluice_input_tokens_reported", nil, -1},
		{"sluice_spend_usd", nil, -1},
	} {
		v, ok := value(mfs, c.name, c.labels...)
		if (!ok && c.want != 0) || (c.want >= 0 && v != c.want) || (c.want < 0 && v <= 0) {
			t.Errorf("file: %s%v = %v, want %v (-1: more than 0)", c.name, c.labels, v, c.want)
		}
	}
	if _, ok := value(mfs, "sluice_requests", "job_id", ""); ok {
		t.Error("a series without job_id")
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0o666 &^ umask(t); fi.Mode().Perm() != want {
		t.Errorf("--metrics-file mode %v, want %v (0666 less the umask)", fi.Mode().Perm(), want)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".*")); len(left) != 0 {
		t.Errorf("temp files left beside the metrics file: %v", left)
	}
}
