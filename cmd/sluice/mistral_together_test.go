package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// Mistral and Together are rows of TestProviderMatrix (matrix_test.go): a
// fresh run, Ctrl-C, a SIGKILL loop, a dead endpoint and a wrong key. The
// test here covers what the matrix does not: `sluice providers`; faults,
// hostile output and cancel run in process (lifecycle/faults_test.go).

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
	return writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("c%05d", i)
		model := []string{"mistral-small-latest", "meta-llama/Llama-3.3-70B-Instruct-Turbo"}[i%2]
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":64,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"question %d"}]}}`, id, model, i)
	})
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
