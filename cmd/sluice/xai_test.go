package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func xaiEnv(addr, key string) []string {
	return []string{"XAI_API_KEY=" + key, "XAI_BASE_URL=http://" + addr + "/xai/v1"}
}

// TestXAIFileInputRun: with --xai-input file, each chunk is uploaded as a
// JSONL file and its batch made from it (input_file_id); the run finishes
// with every request once, nothing run twice, and no file left at the
// provider.
func TestXAIFileInputRun(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=" + matrixKey}, "--batch-time", "200ms")
	dir := t.TempDir()
	in, ids := writeMTInput(t, dir, 20)
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceWithin(t, time.Minute, xaiEnv(emu.addr, matrixKey), "run", in, "--out", out, "--provider", "xai",
		"--state", filepath.Join(dir, "state"), "--xai-input", "file", "--max-batch-requests", "5", "--rate", "-1",
		"--poll-interval", "20ms", "--max-poll-interval", "100ms")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	for _, o := range checkOutput(t, out, ids) {
		if o.Response == nil || o.Response.StatusCode != 200 {
			t.Fatalf("%s: %+v, want a success", o.CustomID, o)
		}
	}
	st := emu.stats(t)
	if st["files_uploaded"] != 4 || st["batches_created"] != 4 || st["requests_processed_more_than_once"] != 0 {
		t.Errorf("stats %v: want 4 files, 4 batches, nothing run twice", st)
	}
	if files := providerFilesAt(t, emu, matrixKey, "/xai/v1/files"); len(files) != 0 {
		t.Errorf("%d files left at the provider: %v", len(files), files)
	}
}

// TestXAIBadFlags: an unknown --xai-input or --xai-cancel-path is a usage
// error (exit 2) naming the flag's choices.
func TestXAIBadFlags(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeMTInput(t, dir, 2)
	for _, flag := range []string{"--xai-input", "--xai-cancel-path"} {
		r := runSluiceWithin(t, 30*time.Second, xaiEnv("127.0.0.1:9", "k"), "run", in, "--out", filepath.Join(dir, "o.jsonl"),
			"--provider", "xai", "--state", filepath.Join(dir, "state"), flag, "bogus")
		if r.code != exitUsage || !strings.Contains(r.stderr, `"bogus"`) {
			t.Fatalf("%s bogus: exit %d, want 2\n%s", flag, r.code, lastBytes(r.stderr, 2000))
		}
	}
}
