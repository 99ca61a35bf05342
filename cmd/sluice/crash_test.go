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
	var lines []byte
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m_%05d", i)
		ids = append(ids, id)
		model := "claude-3-5-haiku-latest"
		if i%2 == 1 {
			model = "claude-sonnet-4-5"
		}
		lines = fmt.Appendf(lines, `{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"hi %d"}]}}`+"\n", id, model, i)
	}
	p := filepath.Join(dir, "in.jsonl")
	writeFile(t, p, lines)
	return p, ids
}
