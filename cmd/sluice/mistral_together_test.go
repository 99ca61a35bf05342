package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Mistral and Together are rows of TestProviderMatrix (matrix_test.go): a
// fresh run, Ctrl-C, a SIGKILL loop, a dead endpoint and a wrong key. The
// tests here cover what the matrix does not: cancel and `sluice
// providers`; faults and hostile output run in process
// (lifecycle/faults_test.go).

// familyEnv is the environment that points sluice at the emulator for a
// family, as a user would set it.
func familyEnv(family, key, addr string) []string {
	switch family {
	case "mistral":
		return []string{"MISTRAL_API_KEY=" + key, "MISTRAL_BASE_URL=http://" + addr + "/mistral"}
	case "together":
		return []string{"TOGETHER_API_KEY=" + key, "TOGETHER_BASE_URL=http://" + addr + "/together/v1"}
	}
	panic("no env for " + family)
}

// writeMTInput writes n chat-completion lines over two models, for Mistral and Together.
func writeMTInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	var b []byte
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%05d", i)
		ids = append(ids, id)
		model := []string{"mistral-small-latest", "meta-llama/Llama-3.3-70B-Instruct-Turbo"}[i%2]
		b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":64,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"question %d"}]}}`+"\n", id, model, i)
	}
	p := filepath.Join(dir, "in.jsonl")
	writeFile(t, p, b)
	return p, ids
}

// TestProvidersCommand: `sluice providers` lists every preset with its
// limits and accepted input; --json gives the same as data.
func TestProvidersCommand(t *testing.T) {
	r := runSluice(t, nil, "providers")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"mistral", "together", "https://api.mistral.ai", "https://api.together.xyz/v1",
		"$MISTRAL_API_KEY", "$TOGETHER_BASE_URL", "100,000,000", "/v1/fim/completions", "custom_id: at most 64"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("providers output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runSluice(t, nil, "providers", "--json")
	var infos []providerInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	got := map[string]providerInfo{}
	for _, p := range infos {
		got[p.Name] = p
	}
	m, tg := got["mistral"], got["together"]
	if m.Family != "mistral" || m.BaseURLEnv != "MISTRAL_BASE_URL" || m.KeyEnv[0] != "MISTRAL_API_KEY" || m.MaxBatchRequests != 100_000 || len(m.Endpoints) == 0 {
		t.Errorf("mistral %+v", m)
	}
	if tg.BaseURL != "https://api.together.xyz/v1" || tg.MaxBatchBytes != 100_000_000 || tg.MaxBatchRequests != 50_000 || tg.MaxCustomID != 64 || tg.InputFormat == "" {
		t.Errorf("together %+v", tg)
	}
	if len(infos) != len(got) || got["openai"].Window == "" {
		t.Errorf("rows %d, openai %+v", len(infos), got["openai"])
	}
}

// TestCancelMistralTogether: `sluice cancel JOB` cancels a job's live
// Mistral or Together batches at the provider and writes the output, one
// line per request: those done before the cancel as successes, the others
// as cancelled.
func TestCancelMistralTogether(t *testing.T) {
	t.Parallel() // its own emulator and state directory
	for _, tc := range []struct{ family, base, path, status string }{
		{"mistral", "/mistral", "/mistral/v1/batch/jobs/", "CANCELLED"},
		{"together", "/together/v1", "/together/v1/batches/", "CANCELLED"},
	} {
		t.Run(tc.family, func(t *testing.T) {
			t.Parallel() // its own emulator and state directory
			emu := startEmulator(t, "--batch-time", "4s")
			dir := t.TempDir()
			in, ids := writeMTInput(t, dir, 40)
			out := filepath.Join(dir, "out.jsonl")
			base := "http://" + emu.addr + tc.base
			env := append(stateEnv(dir), familyEnv(tc.family, "k", emu.addr)...)
			r := runSluice(t, env, "run", in, "--out", out, "--provider", tc.family, "--base-url", base, "--once", "--rate", "-1")
			if r.code != exitStopped {
				t.Fatalf("run --once: exit %d, want 3\n%s", r.code, r.stderr)
			}
			job := onlyJob(t, statusOf(t, env))
			if len(job.Live) != 2 {
				t.Fatalf("after --once: %d live batches, want 2 (one per model)", len(job.Live))
			}
			time.Sleep(2 * time.Second) // about half of each batch done
			r = runSluice(t, env, "cancel", job.ID, "--base-url", base, "--poll-interval", "100ms", "--max-poll-interval", "200ms")
			if r.code != exitFailures && r.code != exitOK {
				t.Fatalf("cancel: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, "cancel requested for 2 of 2 live batches") {
				t.Errorf("cancel says:\n%s", r.stdout)
			}
			for _, b := range job.Live {
				resp, err := http.DefaultClient.Do(mustRequest(t, "GET", "http://"+emu.addr+tc.path+b.BatchID, "k"))
				if err != nil {
					t.Fatal(err)
				}
				var got struct{ Status string }
				json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if got.Status != tc.status {
					t.Errorf("batch %s is %q at the provider, want %s", b.BatchID, got.Status, tc.status)
				}
			}
			var ok int
			for _, l := range checkOutput(t, out, ids) {
				if l.Response != nil && l.Response.StatusCode == 200 {
					ok++
				} else if l.Error == nil {
					t.Errorf("%s: neither a success nor an error: %+v", l.CustomID, l)
				}
			}
			if st := emu.familyStats(t, tc.family); st["batches_created"] != 2 || st["requests_processed_more_than_once"] != 0 || st["requests_processed"] != int64(ok) {
				t.Errorf("%s stats %v with %d successes in the output", tc.family, st, ok)
			}
		})
	}
}

func mustRequest(t *testing.T, method, url, key string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return req
}
