package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

// Results fetched before they expire (issue 23, item 5): status warns of
// results about to expire, run fetches the soonest-expiring first, creates
// send output_expires_after, and results gone at the provider are
// reported as expired.

// emuDetail is what these tests read of the emulator's stats.
type emuDetail struct {
	ResultDownloads    []string         `json:"result_downloads"`
	ResultsExpired     int64            `json:"results_expired"`
	OutputExpiresAfter map[string]int64 `json:"output_expires_after"`
}

func (e *emulatorProc) detail(t *testing.T) emuDetail {
	t.Helper()
	var d emuDetail
	e.getJSON(t, "/_emulator/stats", &d)
	return d
}

// getJSON GETs path of the emulator and decodes its answer; false on a 404.
func (e *emulatorProc) getJSON(t *testing.T, path string, out any) bool {
	t.Helper()
	resp, err := http.Get("http://" + e.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
	return true
}

// emuBatch is an OpenAI batch as the emulator answers it.
type emuBatch struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	OutputFileID string `json:"output_file_id"`
}

// waitEnded waits until the emulator has ended every batch of ids.
func (e *emulatorProc) waitEnded(t *testing.T, ids []string) []emuBatch {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var bs []emuBatch
		for _, id := range ids {
			var b emuBatch
			if !e.getJSON(t, "/v1/batches/"+id, &b) {
				t.Fatalf("batch %s unknown to the emulator", id)
			}
			if b.Status == "completed" {
				bs = append(bs, b)
			}
		}
		if len(bs) == len(ids) {
			return bs
		}
		if time.Now().After(deadline) {
			t.Fatalf("batches %v not completed after 60s", ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// liveBatches returns the batch ids of the job's submitted chunks, in
// chunk order.
func liveBatches(t *testing.T, env []string) []string {
	t.Helper()
	var ids []string
	for _, b := range onlyJob(t, statusOf(t, env)).Live {
		ids = append(ids, b.BatchID)
	}
	return ids
}

func expiryEnv(dir string, emu *emulatorProc) []string {
	return append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
}

// TestStatusWarnsOfExpiringResults: a job left by --once with batches
// that then end at the provider, created with --output-expires-after 2h:
// status warns, in text and --json, that their results expire within a
// day; a job with the default (30 days) gets no warning.
func TestStatusWarnsOfExpiringResults(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--batch-time", "1s")
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"2h", []string{"--output-expires-after", "2h"}, true},
		{"default", nil, false},
	} {
		dir := t.TempDir()
		in, _ := writeInput(t, dir, 12)
		env := expiryEnv(dir, emu)
		before := time.Now()
		r := runSluice(t, env, append([]string{"run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai",
			"--once", "--max-batch-requests", "4", "--rate", "-1"}, tc.args...)...)
		if r.code != exitStopped {
			t.Fatalf("%s: --once exit %d, want %d\n%s", tc.name, r.code, exitStopped, r.stderr)
		}
		ids := liveBatches(t, env)
		if len(ids) != 3 {
			t.Fatalf("%s: %d live batches after --once, want 3", tc.name, len(ids))
		}
		emu.waitEnded(t, ids)
		j := onlyJob(t, statusOf(t, env))
		text := runSluice(t, env, "status").stdout
		if !tc.warn {
			if j.Expiring != nil || strings.Contains(text, "WARNING") {
				t.Errorf("%s: status warns of expiry with 30 days' retention: %+v\n%s", tc.name, j.Expiring, text)
			}
			continue
		}
		if j.Expiring == nil || j.Expiring.Batches != 3 || j.Expiring.Requests != 12 || len(j.Expiring.Chunks) != 3 {
			t.Fatalf("%s: status --json results_expiring = %+v, want 3 batches of 12 requests", tc.name, j.Expiring)
		}
		if at := j.Expiring.FirstAt; at.Before(before.Add(2*time.Hour-time.Second)) || at.After(time.Now().Add(2*time.Hour)) {
			t.Errorf("%s: first expiry %s, want 2h after submission (%s)", tc.name, at, before)
		}
		for _, b := range j.Live {
			if b.ResultsExpireAt.IsZero() {
				t.Errorf("%s: live batch %s has no results_expire_at", tc.name, b.BatchID)
			}
		}
		if !strings.Contains(text, "expiry:   WARNING: results of 3 batches (12 requests) not fetched yet may expire at the provider within a day") {
			t.Errorf("%s: status text has no expiry warning:\n%s", tc.name, text)
		}
	}
}

// TestCreateSendsOutputExpiresAfter: OpenAI creates send
// output_expires_after: 30 days by default, --output-expires-after when
// given; a value outside 1h..720h is refused (exit 2) before anything is
// sent; a preset not known to take it (azure) sends none by default.
func TestCreateSendsOutputExpiresAfter(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	run := func(env []string, args ...string) result {
		dir := t.TempDir()
		in, _ := writeInput(t, dir, 6)
		return runSluice(t, append(stateEnv(dir), env...), append([]string{"run", in, "--out", filepath.Join(dir, "out.jsonl"),
			"--max-batch-requests", "2", "--rate", "-1", "--poll-interval", "20ms"}, args...)...)
	}
	openaiEnv := []string{"OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://" + emu.addr + "/v1"}
	for _, bad := range []string{"30m", "721h", "90m500ms"} {
		if r := run(openaiEnv, "--provider", "openai", "--output-expires-after", bad); r.code != exitUsage || !strings.Contains(r.stderr, "--output-expires-after") {
			t.Errorf("--output-expires-after %s: exit %d, want %d with the flag named\n%s", bad, r.code, exitUsage, r.stderr)
		}
	}
	if d := emu.detail(t); len(d.OutputExpiresAfter) != 0 {
		t.Fatalf("refused runs created batches: %v", d.OutputExpiresAfter)
	}
	if r := run(openaiEnv, "--provider", "openai"); r.code != 0 {
		t.Fatalf("default run: exit %d\n%s", r.code, r.stderr)
	}
	if r := run(openaiEnv, "--provider", "openai", "--output-expires-after", "1h"); r.code != 0 {
		t.Fatalf("--output-expires-after 1h: exit %d\n%s", r.code, r.stderr)
	}
	azureEnv := []string{"AZURE_OPENAI_API_KEY=k", "AZURE_OPENAI_BASE_URL=http://" + emu.addr + "/v1"}
	if r := run(azureEnv, "--provider", "azure"); r.code != 0 {
		t.Fatalf("azure: exit %d\n%s", r.code, r.stderr)
	}
	want := map[string]int64{"2592000": 3, "3600": 3, "none": 3}
	if got := emu.detail(t).OutputExpiresAfter; !mapsEqual(got, want) {
		t.Errorf("creates by output_expires_after.seconds = %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRunFetchesSoonestExpiringFirst: chunks 1 and 2 are submitted with
// 30 days' retention, chunk 3 later with one hour's; once all three
// batches ended, a run with one call at a time downloads chunk 3's results
// first (the emulator's download order), then 1's and 2's in the order
// their results expire.
func TestRunFetchesSoonestExpiringFirst(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := emulatorJob(t, 12, "out.jsonl", "--batch-time", "6s")
	env := expiryEnv(dir, emu)
	base := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "4", "--rate", "-1",
		"--poll-interval", "10ms", "--max-poll-interval", "10ms"}
	if r := runSluice(t, env, append(base, "--once", "--max-live-batches", "2")...); r.code != exitStopped {
		t.Fatalf("first --once: exit %d\n%s", r.code, r.stderr)
	}
	if r := runSluice(t, env, append(base, "--once", "--max-live-batches", "3", "--output-expires-after", "1h")...); r.code != exitStopped {
		t.Fatalf("second --once: exit %d\n%s", r.code, r.stderr)
	}
	live := onlyJob(t, statusOf(t, env)).Live
	var batches []string
	for _, b := range live {
		batches = append(batches, b.BatchID)
	}
	if len(batches) != 3 {
		t.Fatalf("%d live batches after two --once runs, want 3 (a batch ended before the runs were done: the machine is too slow for --batch-time 6s)", len(batches))
	}
	emu.waitEnded(t, batches)
	if d := emu.detail(t); len(d.ResultDownloads) != 0 {
		t.Fatalf("results downloaded before the last run: %v", d.ResultDownloads)
	}
	if r := runSluice(t, env, append(base, "--concurrency", "1")...); r.code != 0 {
		t.Fatalf("last run: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	// Chunks 1 and 2 were submitted at once: whichever was created first
	// expires first.
	slices.SortStableFunc(live, func(a, b statusBatch) int { return a.ResultsExpireAt.Compare(b.ResultsExpireAt) })
	var want []string
	for _, b := range live {
		want = append(want, b.BatchID)
	}
	if want[0] != batches[2] {
		t.Fatalf("chunk 3 (1h) does not expire first: %+v", live)
	}
	if got := slices.Compact(emu.detail(t).ResultDownloads); !slices.Equal(got, want) {
		t.Errorf("results downloaded in the order %v, want %v (chunk 3, expiring in 1h, first, then by expiry)", got, want)
	}
}

// TestExpiredResultsReported: the emulator keeps results 1/1000 of the
// retention asked (1h: 3.6s) and cuts every download short. A --once run
// sees the batches end, reads when their output expires and fails to
// download it; once the output is gone at the emulator, the next run's
// download answers 404 and, past that time, its requests are reported
// failed with results_expired (with --max-attempts 1; with attempts left
// they would go to a new batch, as for any batch without results).
func TestExpiredResultsReported(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := emulatorJob(t, 6, "out.jsonl", "--batch-time", "300ms", "--result-retention-scale", "0.001", "--truncate-download-rate", "1")
	env := expiryEnv(dir, emu)
	base := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "2", "--rate", "-1",
		"--output-expires-after", "1h", "--max-attempts", "1", "--http-attempts", "1", "--poll-interval", "10ms"}
	var batches []string
	for i := 0; ; i++ {
		if r := runSluice(t, env, append(base, "--once")...); r.code != exitStopped {
			t.Fatalf("--once: exit %d, want %d\n%s", r.code, exitStopped, r.stderr)
		}
		j := onlyJob(t, statusOf(t, env, "--chunks"))
		tried := 0
		batches = batches[:0]
		for _, c := range j.ChunkList {
			batches = append(batches, c.BatchID)
			if c.FetchFailures > 0 && c.ErrorCode == sluice.CodeResultsUnavailable {
				tried++
			}
		}
		if tried == len(j.ChunkList) {
			break
		}
		if i == 100 {
			t.Fatalf("no download tried on every chunk after 100 --once runs: %+v", j.ChunkList)
		}
	}
	for _, b := range emu.waitEnded(t, batches) {
		deadline := time.Now().Add(60 * time.Second)
		for e := (map[string]any{}); emu.getJSON(t, "/v1/files/"+b.OutputFileID, &e); {
			if time.Now().After(deadline) {
				t.Fatalf("output file %s of batch %s still there after 60s: %v", b.OutputFileID, b.ID, e)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r := runSluice(t, env, base...)
	if r.code != exitFailures {
		t.Fatalf("run after expiry: exit %d, want %d\n%s", r.code, exitFailures, r.stderr)
	}
	errs, err := os.ReadFile(errorsPathFor(out))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(errs)), "\n")
	if len(lines) != len(ids) {
		t.Fatalf("errors file has %d lines, want %d:\n%s", len(lines), len(ids), errs)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"results_expired"`) {
			t.Errorf("error line without results_expired: %s", l)
		}
	}
	if emu.detail(t).ResultsExpired == 0 {
		t.Error("the emulator refused no download as expired")
	}
}
