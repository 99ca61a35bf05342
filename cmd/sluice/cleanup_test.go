package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// providerFiles lists the files the emulator holds (GET /v1/files).
func providerFiles(t *testing.T, emu *emulatorProc) []string {
	t.Helper()
	return providerFilesKey(t, emu, "sk-x")
}

func providerFilesKey(t *testing.T, emu *emulatorProc, key string) []string {
	t.Helper()
	return providerFilesAt(t, emu, key, "/v1/files")
}

// providerFilesAt lists the files of the emulator's family whose file list
// is at path (/v1/files, /mistral/v1/files, /together/v1/files).
func providerFilesAt(t *testing.T, emu *emulatorProc, key, path string) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+emu.addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			Purpose string `json:"purpose"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	var ids []string
	for _, f := range list.Data {
		ids = append(ids, f.ID+" ("+f.Purpose+")")
	}
	return ids
}

// TestProviderFilesDeletedAfterRun (issue 11, item 10): once the output is
// written, the job's files at the provider (inputs and results) are gone;
// --keep-provider-files keeps them, and a later run of the command without
// it deletes them (as it finishes a cleanup a crash interrupted: the job
// is done, its files recorded as not deleted).
func TestProviderFilesDeletedAfterRun(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--line-error-rate", "0.2", "--seed", "5")
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 30)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	args := []string{"--provider", "openai", "--max-attempts", "1", "--rate", "-1", "--poll-interval", "50ms", "--max-poll-interval", "100ms"}

	out := filepath.Join(dir, "out.jsonl")
	r := runSluice(t, env, append([]string{"run", in, "--out", out}, args...)...)
	if r.code != exitFailures { // the line errors make an error file per batch too
		t.Fatalf("run: exit %d, want 4\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	if files := providerFiles(t, emu); len(files) != 0 {
		t.Errorf("after the run the provider still holds %d files: %s", len(files), strings.Join(files, ", "))
	}

	other, ids2 := writeInput(t, t.TempDir(), 30)
	out2 := filepath.Join(dir, "out2.jsonl")
	// The same bodies as the first job's: --reuse=false, or the first job's
	// answers would be reused and fewer batches bought.
	keep := append([]string{"run", other, "--out", out2, "--reuse=false"}, args...)
	if r := runSluice(t, env, append(keep, "--keep-provider-files")...); r.code != exitFailures {
		t.Fatalf("run --keep-provider-files: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out2, ids2)
	files := providerFiles(t, emu)
	var inputs, outputs int
	for _, f := range files {
		switch {
		case strings.HasSuffix(f, "(batch)"):
			inputs++
		case strings.HasSuffix(f, "(batch_output)"):
			outputs++
		}
	}
	if inputs != 3 || outputs < 3 { // 3 (url, model) groups: 3 batches, each with output and error files
		t.Errorf("with --keep-provider-files the provider holds %v; want the 3 inputs and their result files", files)
	}
	if r := runSluice(t, env, keep...); r.code != exitFailures {
		t.Fatalf("re-run without --keep-provider-files: exit %d\n%s", r.code, r.stderr)
	}
	if files := providerFiles(t, emu); len(files) != 0 {
		t.Errorf("the re-run of the done job left %d files at the provider: %s", len(files), strings.Join(files, ", "))
	}
}
