package main

import (
	"fmt"
	"path/filepath"
	"testing"
)

// The crash tests of every provider family (SIGKILL at random moments,
// then the same command left alone) are cells of TestProviderMatrix
// (matrix_test.go).

func writeAnthropicInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	return writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("m_%05d", i)
		model := []string{"claude-3-5-haiku-latest", "claude-sonnet-4-5"}[i%2]
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"hi %d"}]}}`, id, model, i)
	})
}
